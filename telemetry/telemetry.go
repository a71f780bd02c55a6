package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Unknown is the value of a numeric field (UtilizationPct, TemperatureC, PowerWatts,
// Process.UsedMemoryMB) that the device does not report or that could not be read.
const Unknown = -1

// Source values of a Snapshot: which provider took it.
const (
	SourceNVML      = "nvml"
	SourceSimulated = "simulated"
	SourceNone      = "none"
)

// Errors of the package.
var (
	// ErrNVMLUnavailable means NVML cannot be used on this host: the library is missing (no
	// driver, a CPU-only node), it failed to initialise, or the binary was built without cgo
	// (or with the nonvml tag). Auto treats it as "try the next provider".
	ErrNVMLUnavailable = errors.New("nvml unavailable")
	// ErrClosed is returned by Snapshot after Close.
	ErrClosed = errors.New("telemetry provider closed")
	// ErrNoSuchGPU is returned by the simulated provider for an index it does not have.
	ErrNoSuchGPU = errors.New("no such gpu")
	// ErrInsufficientMemory is returned by Simulated.Reserve when the GPU has less free memory
	// than asked for; a real GPU would fail the allocation the same way.
	ErrInsufficientMemory = errors.New("insufficient gpu memory")
)

// GPU is the state of one usable GPU at the time of a snapshot. Memory is in MiB (called MB
// throughout the project, as in the gpu_devices table). A field the device does not support, or
// that could not be read, is Unknown (-1); Processes is nil when the process list is not
// available and empty (not nil) when it is available and no process runs.
type GPU struct {
	// Index is the device index as NVML (and CUDA_VISIBLE_DEVICES with PCI bus ordering) sees it.
	Index int `json:"index"`
	// UUID is the stable device identifier ("GPU-…"); prefer it to Index across reboots.
	UUID string `json:"uuid"`
	// Name is the product name, e.g. "NVIDIA A100-SXM4-40GB" (empty when unreadable).
	Name string `json:"name"`
	// MemoryTotalMB, MemoryUsedMB and MemoryFreeMB are the device memory as the driver reports
	// it; used memory includes memory held by processes outside the orchestrator's control.
	MemoryTotalMB int64 `json:"memory_total_mb"`
	MemoryUsedMB  int64 `json:"memory_used_mb"`
	MemoryFreeMB  int64 `json:"memory_free_mb"`
	// UtilizationPct is the percentage of time a kernel ran over the last sample period
	// (0–100), or Unknown.
	UtilizationPct int `json:"utilization_pct"`
	// TemperatureC is the core temperature in degrees Celsius, or Unknown.
	TemperatureC int `json:"temperature_c"`
	// PowerWatts is the board power draw in watts, or Unknown.
	PowerWatts float64 `json:"power_watts"`
	// Processes are the compute processes on the device; nil when not available.
	Processes []Process `json:"processes"`
	// MIG is the device's current MIG mode, MIGEnabled or MIGDisabled; empty when the device
	// does not say (no MIG support, or an older worker).
	MIG string `json:"mig,omitempty"`
}

// MIG modes of GPU.MIG.
const (
	MIGEnabled  = "enabled"
	MIGDisabled = "disabled"
)

// Process is one compute process running on a GPU.
type Process struct {
	// PID is the process id in the host's PID namespace (it may not be visible in a container).
	PID int `json:"pid"`
	// UsedMemoryMB is the GPU memory the process holds, or Unknown (e.g. under WDDM or MIG).
	UsedMemoryMB int64 `json:"used_memory_mb"`
}

// LostGPU is a device the provider counted but could not use: NVML reported it lost
// (ERROR_GPU_IS_LOST, the GPU fell off the bus) or needing a reset, or a required field (handle,
// UUID, memory) could not be read. It is not in Snapshot.GPUs, so placement never picks it; it
// is reported so operators (and the gpu_devices writer) can see it went away.
type LostGPU struct {
	// Index is the device index.
	Index int `json:"index"`
	// UUID is the device UUID when it could be read before the failure, else empty.
	UUID string `json:"uuid,omitempty"`
	// Reason says what failed, e.g. "read memory: ERROR_GPU_IS_LOST".
	Reason string `json:"reason"`
}

// Snapshot is the GPU state of one node at one moment.
type Snapshot struct {
	// NodeID names the node the GPUs belong to.
	NodeID string `json:"node_id"`
	// Taken is when the snapshot was read.
	Taken time.Time `json:"taken"`
	// GPUs are the usable devices, ordered by index. Empty on a CPU-only node.
	GPUs []GPU `json:"gpus"`
	// Lost are the devices that exist but must not be used (see LostGPU); nil when none.
	Lost []LostGPU `json:"lost,omitempty"`
	// Source is the provider that took it: SourceNVML, SourceSimulated or SourceNone.
	Source string `json:"source"`
	// DriverVersion is the GPU driver's version ("550.54.15"; "sim" for simulated GPUs) and
	// CUDAVersion the CUDA version it supports ("12.4"); empty when unknown. They become the
	// node's gpu.driver and gpu.cuda labels (nodelabels).
	DriverVersion string `json:"driver_version,omitempty"`
	CUDAVersion   string `json:"cuda_version,omitempty"`
}

// GPU returns the usable GPU with the given index, if the snapshot has it.
func (s Snapshot) GPU(index int) (GPU, bool) {
	for _, g := range s.GPUs {
		if g.Index == index {
			return g, true
		}
	}
	return GPU{}, false
}

// Provider reads the GPU state of the local node. Implementations are safe for concurrent use.
type Provider interface {
	// Snapshot reads the current state of every GPU. A device that cannot be used is reported
	// in Snapshot.Lost, not as an error; the error is for a failure to read the node at all.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Name is the provider's kind: "nvml", "simulated" or "none" (the Source of its snapshots).
	Name() string
	// Close releases the provider (NVML: shuts the library down). Idempotent.
	Close() error
}

// NVMLOptions are optional settings of NewNVML.
type NVMLOptions struct {
	// LibraryPath is the NVML shared library to load (default: libnvidia-ml.so.1 from the
	// dynamic loader's search path).
	LibraryPath string
	// Now is the clock that stamps snapshots (default time.Now).
	Now func() time.Time
	// Logger receives debug lines about fields a device could not report (default
	// slog.Default()).
	Logger *slog.Logger
}

// None is the provider of a node without GPUs: every snapshot is empty with Source "none", so a
// CPU-only worker still reports telemetry and GPU jobs are never placed on it.
type None struct {
	nodeID string
	now    func() time.Time
}

// NewNone returns the provider of a CPU-only node.
func NewNone(nodeID string) *None {
	return &None{nodeID: nodeID, now: time.Now}
}

// Snapshot returns an empty snapshot (no GPUs) stamped now.
func (n *None) Snapshot(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	return Snapshot{NodeID: n.nodeID, Taken: n.now(), GPUs: []GPU{}, Source: SourceNone}, nil
}

// Name returns "none".
func (n *None) Name() string { return SourceNone }

// Close does nothing.
func (n *None) Close() error { return nil }

// mib converts a byte count to whole MiB.
func mib(b uint64) int64 { return int64(b >> 20) }
