//go:build cgo && !nonvml

package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/require"
)

const gib = uint64(1) << 30

// nvmlBundle is a provider over a dgxa100 mock (8 A100-40GB) whose optional fields are set to
// distinct values per device: used memory i GiB, utilization 10·i %, temperature 40+i °C,
// power 100.5+i W and one process (pid 1000+i, 512 MiB).
type nvmlBundle struct {
	server   *dgxa100.Server
	provider *nvmlProvider
	now      time.Time
}

func setupNVML(t *testing.T, mutate func(s *dgxa100.Server)) *nvmlBundle {
	t.Helper()
	server := dgxa100.New()
	for i := range server.Devices {
		d := device(server, i)
		d.MemoryInfo = nvml.Memory{Total: 40 * gib, Used: uint64(i) * gib, Free: (40 - uint64(i)) * gib}
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: 5}, nvml.SUCCESS
		}
		d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return uint32(40 + i), nvml.SUCCESS
		}
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(100500 + 1000*i), nvml.SUCCESS }
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: uint32(1000 + i), UsedGpuMemory: 512 << 20}}, nvml.SUCCESS
		}
	}
	if mutate != nil {
		mutate(server)
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	p, err := newNVMLWith(server, "node-a", NVMLOptions{
		Now:    func() time.Time { return now },
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return &nvmlBundle{server: server, provider: p, now: now}
}

func device(s *dgxa100.Server, i int) *dgxa100.Device { return s.Devices[i].(*dgxa100.Device) }

func TestNVMLSnapshot(t *testing.T) {
	t.Parallel()

	t.Run("ValuesComeThrough", func(t *testing.T) {
		t.Parallel()
		b := setupNVML(t, nil)
		snap, err := b.provider.Snapshot(context.Background())
		require.NoError(t, err)
		require.Equal(t, "node-a", snap.NodeID)
		require.Equal(t, SourceNVML, snap.Source)
		require.Equal(t, b.now, snap.Taken)
		require.Nil(t, snap.Lost)
		require.Len(t, snap.GPUs, 8)
		for i, g := range snap.GPUs {
			require.Equal(t, GPU{
				Index:          i,
				UUID:           device(b.server, i).UUID,
				Name:           "Mock NVIDIA A100-SXM4-40GB",
				MemoryTotalMB:  40960,
				MemoryUsedMB:   int64(i) * 1024,
				MemoryFreeMB:   int64(40-i) * 1024,
				UtilizationPct: 10 * i,
				TemperatureC:   40 + i,
				PowerWatts:     100.5 + float64(i),
				Processes:      []Process{{PID: 1000 + i, UsedMemoryMB: 512}},
				MIG:            MIGDisabled,
			}, g)
		}
		require.Equal(t, b.server.DriverVersion, snap.DriverVersion)
		require.NotEmpty(t, snap.DriverVersion)
		require.Equal(t, fmt.Sprintf("%d.%d", b.server.CudaDriverVersion/1000, b.server.CudaDriverVersion%1000/10), snap.CUDAVersion)
		g, ok := snap.GPU(3)
		require.True(t, ok)
		require.Equal(t, 3, g.Index)
	})

	t.Run("NotSupportedLeavesFieldsUnknown", func(t *testing.T) {
		t.Parallel()
		b := setupNVML(t, func(s *dgxa100.Server) {
			d := device(s, 2)
			d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
			d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
			d.GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_NOT_SUPPORTED }
			// Other failures of optional fields are tolerated the same way.
			device(s, 4).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
				return nil, nvml.ERROR_NO_PERMISSION
			}
		})
		snap, err := b.provider.Snapshot(context.Background())
		require.NoError(t, err)
		require.Len(t, snap.GPUs, 8)
		require.Nil(t, snap.Lost)
		g := snap.GPUs[2]
		require.Equal(t, Unknown, g.UtilizationPct)
		require.Equal(t, Unknown, g.TemperatureC)
		require.Equal(t, float64(Unknown), g.PowerWatts)
		require.Nil(t, g.Processes)
		require.Empty(t, g.Name)
		require.Equal(t, int64(40960), g.MemoryTotalMB, "required fields still come through")
		require.Equal(t, device(b.server, 2).UUID, g.UUID)
		require.Nil(t, snap.GPUs[4].Processes)
		require.Equal(t, 40, snap.GPUs[4].UtilizationPct)
	})

	t.Run("ProcessesEmptyAndMemoryNotAvailable", func(t *testing.T) {
		t.Parallel()
		b := setupNVML(t, func(s *dgxa100.Server) {
			device(s, 0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
			device(s, 1).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: math.MaxUint64}}, nvml.SUCCESS
			}
		})
		snap, err := b.provider.Snapshot(context.Background())
		require.NoError(t, err)
		require.NotNil(t, snap.GPUs[0].Processes, "available but empty is not nil")
		require.Empty(t, snap.GPUs[0].Processes)
		require.Equal(t, []Process{{PID: 7, UsedMemoryMB: Unknown}}, snap.GPUs[1].Processes)
	})

	t.Run("LostDevicesAreSkippedAndReported", func(t *testing.T) {
		t.Parallel()
		b := setupNVML(t, func(s *dgxa100.Server) {
			device(s, 1).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
			device(s, 3).GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
			device(s, 5).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
				return nvml.Utilization{}, nvml.ERROR_RESET_REQUIRED
			}
			device(s, 6).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
			handle := s.DeviceGetHandleByIndexFunc
			s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
				if i == 7 {
					return nil, nvml.ERROR_GPU_IS_LOST
				}
				return handle(i)
			}
		})
		snap, err := b.provider.Snapshot(context.Background())
		require.NoError(t, err)
		var indexes []int
		for _, g := range snap.GPUs {
			indexes = append(indexes, g.Index)
		}
		require.Equal(t, []int{0, 2, 4}, indexes)
		require.Equal(t, []LostGPU{
			{Index: 1, UUID: device(b.server, 1).UUID, Reason: "read memory: ERROR_GPU_IS_LOST"},
			{Index: 3, UUID: device(b.server, 3).UUID, Reason: "read power: ERROR_GPU_IS_LOST"},
			{Index: 5, UUID: device(b.server, 5).UUID, Reason: "read utilization: ERROR_RESET_REQUIRED"},
			{Index: 6, Reason: "read uuid: ERROR_UNKNOWN"},
			{Index: 7, Reason: "get device handle: ERROR_GPU_IS_LOST"},
		}, snap.Lost)
	})

	t.Run("LostChangesAreLoggedOnce", func(t *testing.T) {
		t.Parallel()
		server := setupNVML(t, nil).server
		var logs bytes.Buffer
		p, err := newNVMLWith(server, "node-a", NVMLOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		d := device(server, 4)
		memory := d.GetMemoryInfoFunc
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
		for range 3 {
			snap, err := p.Snapshot(context.Background())
			require.NoError(t, err)
			require.Len(t, snap.Lost, 1)
		}
		require.Equal(t, 1, strings.Count(logs.String(), "gpu unusable"), logs.String())
		require.Contains(t, logs.String(), "gpu_index=4")
		d.GetMemoryInfoFunc = memory
		snap, err := p.Snapshot(context.Background())
		require.NoError(t, err)
		require.Nil(t, snap.Lost)
		require.Len(t, snap.GPUs, 8)
		require.Equal(t, 1, strings.Count(logs.String(), "gpu usable again"), logs.String())
	})

	t.Run("CountFailureFailsSnapshot", func(t *testing.T) {
		t.Parallel()
		b := setupNVML(t, func(s *dgxa100.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		})
		_, err := b.provider.Snapshot(context.Background())
		require.ErrorIs(t, err, nvml.ERROR_UNKNOWN)
		require.ErrorContains(t, err, "count nvml devices")
	})

	t.Run("CanceledContext", func(t *testing.T) {
		t.Parallel()
		b := setupNVML(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := b.provider.Snapshot(ctx)
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := setupNVML(t, nil)
		var wg sync.WaitGroup
		counts := make(chan int, 8)
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				snap, err := b.provider.Snapshot(context.Background())
				errs <- err
				counts <- len(snap.GPUs)
			})
		}
		wg.Wait()
		for range 8 {
			require.NoError(t, <-errs)
			require.Equal(t, 8, <-counts)
		}
	})
}

func TestNVMLLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("InitFailureIsUnavailable", func(t *testing.T) {
		t.Parallel()
		server := dgxa100.New()
		server.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
		p, err := newNVMLWith(server, "node-a", NVMLOptions{})
		require.Nil(t, p)
		require.ErrorIs(t, err, ErrNVMLUnavailable)
		require.ErrorIs(t, err, nvml.ERROR_LIBRARY_NOT_FOUND)
	})

	t.Run("CloseShutsDownOnce", func(t *testing.T) {
		t.Parallel()
		b := setupNVML(t, nil)
		var shutdowns atomic.Int32
		b.server.ShutdownFunc = func() nvml.Return { shutdowns.Add(1); return nvml.SUCCESS }
		require.Equal(t, SourceNVML, b.provider.Name())
		require.NoError(t, b.provider.Close())
		require.NoError(t, b.provider.Close())
		require.Equal(t, int32(1), shutdowns.Load())
		_, err := b.provider.Snapshot(context.Background())
		require.ErrorIs(t, err, ErrClosed)
	})

	t.Run("ShutdownFailure", func(t *testing.T) {
		t.Parallel()
		b := setupNVML(t, func(s *dgxa100.Server) {
			s.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
		})
		err := b.provider.Close()
		require.ErrorIs(t, err, nvml.ERROR_UNKNOWN)
		require.ErrorContains(t, err, "shut down nvml")
	})

	t.Run("RealLibrary", func(t *testing.T) {
		t.Parallel()
		// On a host without the NVIDIA driver (CI, this package's usual home) loading fails
		// with ErrNVMLUnavailable; on a GPU host it must produce a snapshot.
		p, err := NewNVML("node-a", NVMLOptions{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			require.ErrorIs(t, err, ErrNVMLUnavailable)
			require.Nil(t, p)
			return
		}
		defer func() { require.NoError(t, p.Close()) }()
		snap, err := p.Snapshot(context.Background())
		require.NoError(t, err)
		require.Equal(t, SourceNVML, snap.Source)
	})

	t.Run("MissingLibraryPath", func(t *testing.T) {
		t.Parallel()
		_, err := NewNVML("node-a", NVMLOptions{LibraryPath: "/nonexistent/libnvidia-ml.so.1"})
		require.ErrorIs(t, err, ErrNVMLUnavailable)
	})
}
