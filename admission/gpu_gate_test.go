package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func gpu(node string, index int, used, total int64, age time.Duration) store.GPUCapacity {
	return store.GPUCapacity{GPUDevice: store.GPUDevice{NodeID: node, Index: index, MemoryUsedMB: used,
		MemoryTotalMB: total, UpdatedAt: t0.Add(-age)}}
}

func TestMeasurePressure(t *testing.T) {
	t.Parallel()

	t.Run("FreshGPUsOnly", func(t *testing.T) {
		t.Parallel()
		stale := gpu("b", 0, 1000, 1000, time.Minute)
		lost := gpu("a", 2, 1000, 1000, 0)
		lost.Lost = true
		p := MeasurePressure([]store.GPUCapacity{
			gpu("a", 0, 900, 1000, time.Second), gpu("a", 1, 100, 1000, 0), lost, stale,
		}, t0, 30*time.Second)
		require.Equal(t, int64(1000), p.UsedMB)
		require.Equal(t, int64(2000), p.TotalMB)
		require.InDelta(t, 0.5, p.Ratio, 1e-9)
		require.Equal(t, 2, p.FreshGPUs)
		require.Equal(t, 1, p.StaleGPUs)
		require.True(t, p.Known())
		require.Equal(t, []NodePressure{
			{NodeID: "a", UsedMB: 1000, TotalMB: 2000, Ratio: 0.5, GPUs: 2, Fresh: true},
			{NodeID: "b", UsedMB: 1000, TotalMB: 1000, Ratio: 1, GPUs: 1, Fresh: false, Age: time.Minute},
		}, p.Nodes, "a stale node is shown, not counted")
	})

	t.Run("ReservationsCount", func(t *testing.T) {
		t.Parallel()
		// A lease's memory counts before the job allocated it; used above total is capped.
		reserved := gpu("a", 0, 100, 1000, 0)
		reserved.ReservedMB = 950
		over := gpu("a", 1, 1200, 1000, 0)
		p := MeasurePressure([]store.GPUCapacity{reserved, over}, t0, time.Minute)
		require.Equal(t, int64(1950), p.UsedMB)
	})

	t.Run("NothingFresh", func(t *testing.T) {
		t.Parallel()
		p := MeasurePressure([]store.GPUCapacity{gpu("a", 0, 1000, 1000, time.Hour)}, t0, time.Minute)
		require.False(t, p.Known())
		require.Zero(t, p.Ratio)
		p = MeasurePressure(nil, t0, time.Minute)
		require.False(t, p.Known())
		require.Empty(t, p.Nodes)
	})
}

// measured is a pressure of ratio at t0+at, from one fresh GPU.
func measured(ratio float64, at time.Duration) Pressure {
	return Pressure{MeasuredAt: t0.Add(at), UsedMB: int64(ratio * 1000), TotalMB: 1000, Ratio: ratio, FreshGPUs: 1}
}

func TestGPUGateHysteresis(t *testing.T) {
	t.Parallel()
	g := NewGPUGate(90, 80, 30*time.Second)
	closed := func(at time.Duration) bool {
		c, _ := g.Closed(t0.Add(at))
		return c
	}

	require.False(t, g.Observe(measured(0.90, 0)), "at the high watermark: not above it")
	require.False(t, closed(0))

	require.True(t, g.Observe(measured(0.95, time.Second)), "above the high watermark: closes")
	require.True(t, closed(time.Second))
	_, holdLeft := g.Closed(t0.Add(11 * time.Second))
	require.Equal(t, 20*time.Second, holdLeft)

	require.False(t, g.Observe(measured(0.85, 2*time.Second)), "between the watermarks: stays closed")
	require.False(t, g.Observe(measured(0.75, 10*time.Second)), "below the low one, but within the hold")
	require.True(t, closed(10*time.Second))

	// Seen above the high watermark again: the hold counts from then.
	require.False(t, g.Observe(measured(0.92, 20*time.Second)))
	require.False(t, g.Observe(measured(0.75, 45*time.Second)), "31 s after closing, 25 s after the last high reading")
	require.False(t, g.Observe(measured(0.85, 60*time.Second)), "hold over, but between the watermarks")
	require.True(t, closed(60*time.Second))

	require.False(t, g.Observe(Pressure{MeasuredAt: t0.Add(61 * time.Second)}), "no fresh telemetry: no change")
	require.True(t, closed(61*time.Second))

	require.True(t, g.Observe(measured(0.75, 62*time.Second)), "below the low watermark after the hold: opens")
	require.False(t, closed(62*time.Second))
	require.False(t, g.Observe(measured(0.85, 63*time.Second)), "between the watermarks: stays open")
	require.False(t, closed(63*time.Second))

	st := g.State()
	require.Equal(t, 90.0, st.HighPct)
	require.Equal(t, 80.0, st.LowPct)
	require.True(t, st.ClosedSince.IsZero())
	require.InDelta(t, 0.85, st.Pressure.Ratio, 1e-9)
}

func TestGPUGateZeroHold(t *testing.T) {
	t.Parallel()
	g := NewGPUGate(90, 80, 0)
	require.True(t, g.Observe(measured(0.99, 0)))
	require.True(t, g.Observe(measured(0.5, 0)), "without a hold only the watermarks matter")
}
