package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestLeaseAdmissionFlags(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		o, _, err := parseFlags(nil)
		require.NoError(t, err)
		require.Equal(t, []string{"burndown", "streaming", "latency", "leases", "admission"}, o.scenarios)
		require.Equal(t, 200.0, o.leaseRate)
		require.Equal(t, 10*time.Second, o.duration)
	})

	t.Run("Given", func(t *testing.T) {
		t.Parallel()
		o, _, err := parseFlags([]string{"-scenarios", "backlog,admission,leases", "-lease-rate", "50", "-duration", "3s"})
		require.NoError(t, err)
		require.Equal(t, []string{"admission", "leases", "backlog"}, o.scenarios, "backlog still last")
		require.Equal(t, 50.0, o.leaseRate)
		require.Equal(t, 3*time.Second, o.duration)
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"-scenarios", "leases", "-lease-rate", "0"},
			{"-scenarios", "leases", "-lease-rate", "-5"},
			{"-type", parkedType},
		} {
			_, _, err := parseFlags(args)
			require.Error(t, err, "%v", args)
		}
	})
}

func TestStackConfig(t *testing.T) {
	t.Parallel()
	o := &options{jobType: "noop", concurrency: 7}
	own := stackConfig(o, true)
	require.Contains(t, own, "  noop:\n    handler: noop\n")
	require.Contains(t, own, "  "+parkedType+":\n    handler: noop\n")
	require.Contains(t, own, "worker:\n  concurrency: 7\n")
	require.Contains(t, own, "rate_per_sec: 1000000\n    burst: 10000000\n")
	require.NotContains(t, stackConfig(o, false), parkedType, "the workers of an external stack do not get it")
}

func TestLeaseRequest(t *testing.T) {
	t.Parallel()
	require.Equal(t, client.LeaseRequest{Agent: benchAgent, Mode: "gpu", MinMemoryMB: leaseMemoryMB}, leaseRequest(client.LeaseModeGPU))
	require.Equal(t, client.LeaseRequest{Agent: benchAgent, Mode: "cpu"}, leaseRequest(client.LeaseModeCPU))
}

func TestLeaseGPUCheck(t *testing.T) {
	t.Parallel()
	gpu := func(i int, reserved int64, active int) client.GPU {
		return client.GPU{Index: i, MemoryTotalMB: 24576, MemoryReservedMB: reserved, ActiveLeases: active}
	}

	t.Run("WithinCapacity", func(t *testing.T) {
		t.Parallel()
		c := &LeaseGPUCheck{NodeID: "n"}
		c.record([]client.GPU{gpu(0, 1024, 1), gpu(1, 0, 0)}, 512, false)
		c.record([]client.GPU{gpu(0, 24064, 23), gpu(1, 3072, 3), {Index: 2, Lost: true}}, 512, false)
		c.record([]client.GPU{gpu(0, 0, 0), gpu(1, 1024, 1)}, 512, true)
		require.False(t, c.OverCommitted, "24064 MB is exactly the grantable memory")
		require.Equal(t, []LeaseGPU{
			{Index: 0, TotalMB: 24576, GrantableMB: 24064, MaxReservedMB: 24064, MaxActiveLeases: 23},
			{Index: 1, TotalMB: 24576, GrantableMB: 24064, MaxReservedMB: 3072, MaxActiveLeases: 3, ReservedAfterMB: 1024, ActiveLeasesAfter: 1},
		}, c.GPUs, "a lost GPU is skipped; after-run figures do not count as samples")
	})

	t.Run("OverCommitted", func(t *testing.T) {
		t.Parallel()
		c := &LeaseGPUCheck{}
		c.record([]client.GPU{gpu(0, 24065, 24)}, 512, false)
		require.True(t, c.OverCommitted)
		c = &LeaseGPUCheck{}
		c.record([]client.GPU{gpu(0, 24065, 24)}, 0, false)
		require.False(t, c.OverCommitted, "without a known margin the whole memory is grantable")
	})
}

func TestLeasesLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "no lease granted", leasesLine(&ScenarioResult{}))
	res := &ScenarioResult{
		LeaseModes: []LeaseMode{{Mode: "gpu", Offered: 10, Granted: 9, GrantsPerSec: 4.5,
			GrantMS: &Percentiles{P50: 2, P99: 3}, ReleaseMS: &Percentiles{P50: 1, P99: 1.5}}, {Mode: "cpu", Offered: 10}},
		LeaseGPUs: &LeaseGPUCheck{Samples: 5},
	}
	require.Equal(t, "gpu 9/10 granted (4/s), grant ms p50 2.0 p99 3.0, release ms p50 1.0 p99 1.5; cpu 0/10 granted (0/s); "+
		"over-committed: false (5 samples of GET /gpus)", leasesLine(res))
}

func TestPaced(t *testing.T) {
	t.Parallel()

	t.Run("EveryEventOnce", func(t *testing.T) {
		t.Parallel()
		const total = 200
		lag := make([]time.Duration, total)
		calls := make([]atomic.Int32, total)
		var running, most atomic.Int32
		start, end := paced(context.Background(), total, 1e6, 4, lag, func(i int) {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() { //nolint:revive // a CAS loop: the condition is the work
			}
			calls[i].Add(1)
			running.Add(-1)
		})
		for i := range calls {
			require.Equal(t, int32(1), calls[i].Load(), "event %d", i)
			require.Positive(t, lag[i], "event %d has its lag", i)
		}
		require.LessOrEqual(t, most.Load(), int32(4), "never more than maxInflight at once")
		require.False(t, end.Before(start))
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var n atomic.Int32
		paced(ctx, 1000, 1, 4, make([]time.Duration, 1000), func(int) { n.Add(1) })
		require.LessOrEqual(t, n.Load(), int32(1), "a cancelled schedule sends at most what was due at once")
	})
}

func TestNoLeaseModeLine(t *testing.T) {
	t.Parallel()
	require.True(t, strings.HasPrefix(summaryLine("leases", &ScenarioResult{}), "no lease"))
	require.Equal(t, "nothing measured", summaryLine("admission", &ScenarioResult{}))
}
