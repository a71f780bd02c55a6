//go:build cgo && !nonvml

package telemetry_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
)

// TestNVMLPlacement wires the NVML provider over the dgxa100 mock (8 A100-40GB) to lease
// placement: its snapshot goes to gpu_devices, the used memory NVML reports counts against
// every GPU (free = total − max(used, reserved) − margin), and a lost GPU is never chosen.
func TestNVMLPlacement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server := dgxa100.New()
	for i := range server.Devices {
		d := server.Devices[i].(*dgxa100.Device)
		used := uint64(i) << 30 // i GiB held by processes the orchestrator knows nothing of
		d.MemoryInfo = nvml.Memory{Total: 40 << 30, Used: used, Free: 40<<30 - used}
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	}
	server.Devices[2].(*dgxa100.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
	}
	provider, err := telemetry.NewNVMLFromLib(server, "dgx-1")
	require.NoError(t, err)
	t.Cleanup(func() { _ = provider.Close() })

	m, err := leases.New(testenv.MySQLStore(t), leases.Config{}, leases.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	poller, err := telemetry.NewPoller(provider, telemetry.PollerConfig{Sink: m.RecordSnapshot})
	require.NoError(t, err)
	require.NoError(t, poller.Start(ctx))
	t.Cleanup(poller.Stop)
	require.Eventually(t, func() bool {
		gpus, err := m.GPUs(ctx, "dgx-1")
		return err == nil && len(gpus) == 8
	}, 10*time.Second, 10*time.Millisecond, "the poller's sink records the snapshot")

	gpus, err := m.GPUs(ctx, "dgx-1")
	require.NoError(t, err)
	require.True(t, gpus[2].Lost)
	require.Contains(t, gpus[2].LostReason, "ERROR_GPU_IS_LOST")
	require.Equal(t, telemetry.SourceNVML, gpus[0].Source)
	require.Equal(t, "Mock NVIDIA A100-SXM4-40GB", gpus[0].Name)
	require.EqualValues(t, 40960-3*1024-512, gpus[3].FreeMB, "NVML's used memory counts")

	grant := func(mb int64) (int, error) {
		l, err := m.Grant(ctx, leases.GrantParams{Agent: "a", NodeID: "dgx-1", Mode: store.LeaseGPU, MemoryMB: mb})
		if err != nil {
			return -1, err
		}
		return *l.GPUIndex, nil
	}
	idx, err := grant(40000)
	require.NoError(t, err)
	require.Equal(t, 0, idx, "only the idle GPU has 40000 MB free")
	idx, err = grant(38500)
	require.NoError(t, err)
	require.Equal(t, 1, idx, "best fit: GPU 1 (39424 MB free); GPU 2 would fit by size but is lost")
	_, err = grant(38500)
	d, ok := leases.IsDenial(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, leases.ReasonNoCapacity, d.Reason)
}
