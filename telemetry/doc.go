// Package telemetry reads the GPU state of the local node: memory, utilization, temperature,
// power and the processes of every GPU, as a Snapshot. The orchestrator stores snapshots in the
// gpu_devices table, where lease placement and the GPU-memory admission gate read them; a
// worker sends its node's snapshot with its heartbeat.
//
// # Providers
//
// A Provider takes snapshots. There are three, and Auto picks one per node:
//
//   - NVML (NewNVML) reads real GPUs through the NVIDIA Management Library, using
//     github.com/NVIDIA/go-nvml. A field a device does not support (utilization,
//     temperature, power, processes) is Unknown (-1) or nil rather than an error. A device that is lost (ERROR_GPU_IS_LOST),
//     needs a reset, or whose UUID or memory cannot be read is left out of Snapshot.GPUs and
//     listed in Snapshot.Lost, so placement never picks it while operators still see it.
//   - Simulated (NewSimulated) reports the GPUs of a spec such as "2x24576" (ORCH_SIM_GPUS) on
//     hosts without GPUs. Its used memory follows Reserve and Release, so the whole path from
//     admission to placement can be tested on a laptop or in CI.
//   - None (NewNone) is a CPU-only node: snapshots are empty, with Source "none".
//
// Auto tries NVML first (unless disabled), then the simulation when a spec is given, then None.
//
// # Why NVML sits behind build tags
//
// go-nvml loads libnvidia-ml.so with dlopen through cgo, so anything that imports it, its mocks
// included, needs a C toolchain to build. Every go-nvml import is in files constrained with
// "//go:build cgo && !nonvml"; nvml_nocgo.go provides a NewNVML that returns ErrNVMLUnavailable
// for CGO_ENABLED=0 builds and for builds with the nonvml tag. The rest of the project, and
// this package's API, is the same in both builds: a static binary simply never sees a GPU and
// falls back to the simulated or None provider. The library itself is loaded at run time, not
// linked, so a cgo binary still starts on a node without the NVIDIA driver.
//
// # Polling
//
// Poller reads a Provider every PollerIntervalDefault (± jitter), keeps the latest snapshot
// (Latest) and hands each snapshot to a Sink.
package telemetry
