//go:build cgo && !nonvml

package telemetry

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlProvider is the provider backed by the NVIDIA Management Library. It reads every device
// on each Snapshot; NVML itself is thread-safe, and Close waits for snapshots in flight. It is
// unexported so the package API is the same with and without cgo.
type nvmlProvider struct {
	lib    nvml.Interface
	nodeID string
	now    func() time.Time
	log    *slog.Logger

	mu     sync.RWMutex // held for reading by Snapshot, for writing by Close
	closed bool

	lostMu sync.Mutex
	lost   map[int]string // reasons of the devices lost at the last snapshot, to log changes once

	// driver and cuda are the driver's version and the CUDA version it supports, read once at
	// start: neither changes while the library is loaded (an upgrade reloads the driver).
	driver, cuda string
}

// NewNVML loads and initialises NVML. It returns an error wrapping ErrNVMLUnavailable when the
// library cannot be loaded or initialised (no driver, a CPU-only node, a driver/library version
// mismatch); the NVML return code is wrapped too, so errors.Is(err, nvml.ERROR_…) works.
func NewNVML(nodeID string, opts NVMLOptions) (Provider, error) {
	var libOpts []nvml.LibraryOption
	if opts.LibraryPath != "" {
		libOpts = append(libOpts, nvml.WithLibraryPath(opts.LibraryPath))
	}
	p, err := newNVMLWith(nvml.New(libOpts...), nodeID, opts)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newNVMLWith initialises lib (the real library or a mock) and returns the provider over it.
func newNVMLWith(lib nvml.Interface, nodeID string, opts NVMLOptions) (*nvmlProvider, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("init nvml: %w: %w", ErrNVMLUnavailable, ret)
	}
	p := &nvmlProvider{
		lib:    lib,
		nodeID: nodeID,
		now:    opts.Now,
		log:    cmp.Or(opts.Logger, slog.Default()).With("component", "telemetry", "provider", SourceNVML),
	}
	if p.now == nil {
		p.now = time.Now
	}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		p.driver = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		p.cuda = fmt.Sprintf("%d.%d", v/1000, v%1000/10) // 12040 is CUDA 12.4
	}
	return p, nil
}

// Name returns "nvml".
func (p *nvmlProvider) Name() string { return SourceNVML }

// Close shuts NVML down. Idempotent; later Snapshots return ErrClosed.
func (p *nvmlProvider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if ret := p.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shut down nvml: %w", ret)
	}
	return nil
}

// Snapshot reads every device. A device that is lost, needs a reset, or whose handle, UUID or
// memory cannot be read goes to Snapshot.Lost; an optional field (utilization, temperature,
// power, processes) the device does not report is left Unknown. Only a failure to count the
// devices, or the end of ctx, fails the snapshot.
func (p *nvmlProvider) Snapshot(ctx context.Context) (Snapshot, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return Snapshot{}, ErrClosed
	}
	count, ret := p.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Snapshot{}, fmt.Errorf("count nvml devices: %w", ret)
	}
	snap := Snapshot{NodeID: p.nodeID, GPUs: make([]GPU, 0, count), Source: SourceNVML,
		DriverVersion: p.driver, CUDAVersion: p.cuda}
	for i := range count {
		if err := ctx.Err(); err != nil {
			return Snapshot{}, fmt.Errorf("read nvml device %d: %w", i, err)
		}
		g, lost := p.readDevice(i)
		if lost != nil {
			snap.Lost = append(snap.Lost, *lost)
			continue
		}
		snap.GPUs = append(snap.GPUs, g)
	}
	snap.Taken = p.now()
	p.logLostChanges(snap.Lost)
	return snap, nil
}

// logLostChanges logs a device that became unusable, or usable again, once rather than on every
// poll.
func (p *nvmlProvider) logLostChanges(lost []LostGPU) {
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	now := make(map[int]string, len(lost))
	for _, l := range lost {
		now[l.Index] = l.Reason
		if _, was := p.lost[l.Index]; !was {
			p.log.Warn("gpu unusable", "gpu_index", l.Index, "gpu_uuid", l.UUID, "reason", l.Reason)
		}
	}
	for index := range p.lost {
		if _, still := now[index]; !still {
			p.log.Info("gpu usable again", "gpu_index", index)
		}
	}
	p.lost = now
}

// readDevice reads device i, or says why it cannot be used.
func (p *nvmlProvider) readDevice(i int) (GPU, *LostGPU) {
	g := GPU{Index: i, UtilizationPct: Unknown, TemperatureC: Unknown, PowerWatts: Unknown}
	lostAt := func(what string, ret nvml.Return) *LostGPU {
		return &LostGPU{Index: i, UUID: g.UUID, Reason: what + ": " + ret.Error()}
	}
	dev, ret := p.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return GPU{}, lostAt("get device handle", ret)
	}
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return GPU{}, lostAt("read uuid", ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return GPU{}, lostAt("read memory", ret)
	}
	g.MemoryTotalMB, g.MemoryUsedMB, g.MemoryFreeMB = mib(mem.Total), mib(mem.Used), mib(mem.Free)

	// Optional fields: a lost device is still lost, anything else leaves the field unknown.
	name, ret := dev.GetName()
	if p.optional(i, "name", ret) {
		g.Name = name
	} else if unusable(ret) {
		return GPU{}, lostAt("read name", ret)
	}
	util, ret := dev.GetUtilizationRates()
	if p.optional(i, "utilization", ret) {
		g.UtilizationPct = int(util.Gpu)
	} else if unusable(ret) {
		return GPU{}, lostAt("read utilization", ret)
	}
	temp, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
	if p.optional(i, "temperature", ret) {
		g.TemperatureC = int(temp)
	} else if unusable(ret) {
		return GPU{}, lostAt("read temperature", ret)
	}
	milliwatts, ret := dev.GetPowerUsage()
	if p.optional(i, "power", ret) {
		g.PowerWatts = float64(milliwatts) / 1000
	} else if unusable(ret) {
		return GPU{}, lostAt("read power", ret)
	}
	current, _, ret := dev.GetMigMode()
	if p.optional(i, "mig mode", ret) {
		g.MIG = MIGDisabled
		if current == nvml.DEVICE_MIG_ENABLE {
			g.MIG = MIGEnabled
		}
	} else if unusable(ret) {
		return GPU{}, lostAt("read mig mode", ret)
	}
	procs, ret := dev.GetComputeRunningProcesses()
	if p.optional(i, "processes", ret) {
		g.Processes = convertProcesses(procs)
	} else if unusable(ret) {
		return GPU{}, lostAt("read processes", ret)
	}
	return g, nil
}

// optional reports whether an optional read succeeded. A failure that does not make the device
// unusable is logged at debug level: NOT_SUPPORTED (consumer boards, vGPU) and NO_PERMISSION
// (process lists in containers) are normal and would otherwise flood the log every poll.
func (p *nvmlProvider) optional(index int, field string, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	if !unusable(ret) {
		p.log.Debug("gpu field unavailable", "gpu_index", index, "field", field, "error", ret.Error())
	}
	return false
}

// unusable reports whether ret means the device must not be used until someone intervenes.
func unusable(ret nvml.Return) bool {
	return ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_RESET_REQUIRED
}

// convertProcesses converts NVML's process list; the result is empty, not nil, when no process
// runs, since nil means "not available".
func convertProcesses(in []nvml.ProcessInfo) []Process {
	out := make([]Process, 0, len(in))
	for _, pi := range in {
		used := int64(Unknown)
		if pi.UsedGpuMemory != math.MaxUint64 { // NVML_VALUE_NOT_AVAILABLE
			used = mib(pi.UsedGpuMemory)
		}
		out = append(out, Process{PID: int(pi.Pid), UsedMemoryMB: used})
	}
	return out
}
