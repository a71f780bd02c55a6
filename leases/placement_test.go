package leases

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

func gpu(index int, total, used, reserved int64, updated time.Time) store.GPUCapacity {
	return store.GPUCapacity{
		GPUDevice:  store.GPUDevice{NodeID: "n", Index: index, MemoryTotalMB: total, MemoryUsedMB: used, UpdatedAt: updated},
		ReservedMB: reserved,
	}
}

func TestFreeMB(t *testing.T) {
	t.Parallel()
	now := time.Now()
	cases := []struct {
		name                  string
		total, used, reserved int64
		want                  int64
	}{
		{"Idle", 24576, 0, 0, 24064},
		{"UsedAboveReserved", 24576, 10000, 4000, 14064}, // a process we know nothing of
		{"ReservedAboveUsed", 24576, 4000, 10000, 14064}, // a holder that has not allocated yet
		{"OverFull", 24576, 24576, 0, -512},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, FreeMB(gpu(0, tc.total, tc.used, tc.reserved, now), 512), tc.name)
	}
}

func TestPlace(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{SafetyMarginMB: 512, TelemetryFreshness: 30 * time.Second}

	t.Run("BestFitThenFull", func(t *testing.T) {
		t.Parallel()
		n := newNodeLock("n", []store.GPUCapacity{
			gpu(0, 81920, 0, 0, now), gpu(1, 24576, 0, 0, now), gpu(2, 24576, 0, 14000, now),
		}, now, cfg)
		idx, mb, err := n.Place(Request{MemoryMB: 10000})
		require.NoError(t, err)
		require.Equal(t, []int{2}, idx, "the tightest fit: 10064 MB free")
		require.EqualValues(t, 10000, mb)
		idx, _, err = n.Place(Request{MemoryMB: 10000})
		require.NoError(t, err)
		require.Equal(t, []int{1}, idx, "GPU 2 is full now")
		idx, _, err = n.Place(Request{MemoryMB: 20000})
		require.NoError(t, err)
		require.Equal(t, []int{0}, idx)
		_, _, err = n.Place(Request{MemoryMB: 70000})
		d, ok := IsDenial(err)
		require.True(t, ok)
		require.Equal(t, ReasonNoCapacity, d.Reason)
		require.Contains(t, d.Message, "the most is 61408 MB on GPU 0")
	})

	t.Run("SkipsStaleAndLostGPUs", func(t *testing.T) {
		t.Parallel()
		lost := gpu(0, 81920, 0, 0, now)
		lost.Lost = true
		n := newNodeLock("n", []store.GPUCapacity{lost, gpu(1, 81920, 0, 0, now.Add(-time.Minute)), gpu(2, 24576, 0, 0, now)}, now, cfg)
		idx, _, err := n.Place(Request{MemoryMB: 1000})
		require.NoError(t, err)
		require.Equal(t, []int{2}, idx)
		_, _, err = n.Place(Request{MemoryMB: 30000})
		d, _ := IsDenial(err)
		require.Equal(t, ReasonNoCapacity, d.Reason, "the fresh GPUs are too small")
	})

	t.Run("NodeDenials", func(t *testing.T) {
		t.Parallel()
		_, _, err := newNodeLock("n", nil, now, cfg).Place(Request{MemoryMB: 1})
		d, _ := IsDenial(err)
		require.Equal(t, ReasonNodeUnknown, d.Reason)

		_, _, err = newNodeLock("n", []store.GPUCapacity{gpu(0, 24576, 0, 0, now.Add(-30*time.Second))}, now, cfg).Place(Request{MemoryMB: 1})
		d, _ = IsDenial(err)
		require.Equal(t, ReasonTelemetryStale, d.Reason)
		require.Contains(t, d.Message, "30s old")

		lost := gpu(0, 24576, 0, 0, now)
		lost.Lost = true
		_, _, err = newNodeLock("n", []store.GPUCapacity{lost}, now, cfg).Place(Request{MemoryMB: 1})
		d, _ = IsDenial(err)
		require.Equal(t, ReasonNoCapacity, d.Reason)
		require.Contains(t, d.Message, "lost")
	})

	t.Run("Exclusive", func(t *testing.T) {
		t.Parallel()
		shared := gpu(0, 24576, 0, 1000, now)
		shared.Leases = 1
		n := newNodeLock("n", []store.GPUCapacity{shared, gpu(1, 24576, 2000, 0, now)}, now, cfg)
		idx, mb, err := n.Place(Request{MemoryMB: 4000, Exclusive: true})
		require.NoError(t, err)
		require.Equal(t, []int{1}, idx, "only an unshared GPU")
		require.EqualValues(t, 24576-512, mb, "the whole grantable memory")
		idx, _, err = n.Place(Request{MemoryMB: 1})
		require.NoError(t, err)
		require.Equal(t, []int{0}, idx, "nothing is placed beside an exclusive lease")
		_, _, err = n.Place(Request{MemoryMB: 1, Exclusive: true})
		d, _ := IsDenial(err)
		require.Equal(t, ReasonNoCapacity, d.Reason)
		require.Contains(t, d.Message, "unshared GPU")
	})

	t.Run("SeveralGPUs", func(t *testing.T) {
		t.Parallel()
		n := newNodeLock("n", []store.GPUCapacity{
			gpu(0, 81920, 0, 0, now), gpu(1, 81920, 0, 50000, now), gpu(2, 81920, 0, 20000, now), gpu(3, 81920, 0, 70000, now),
		}, now, cfg)
		idx, mb, err := n.Place(Request{MemoryMB: 30000, GPUs: 2})
		require.NoError(t, err)
		require.Equal(t, []int{1, 2}, idx, "the two tightest fits, distinct")
		require.EqualValues(t, 30000, mb, "on each")
		idx, _, err = n.Place(Request{MemoryMB: 30000, GPUs: 2})
		require.NoError(t, err)
		require.Equal(t, []int{2, 0}, idx, "GPU 1 is full now")
		_, _, err = n.Place(Request{MemoryMB: 30000, GPUs: 2})
		d, ok := IsDenial(err)
		require.True(t, ok, "only GPU 0 still fits 30000 MB: %v", err)
		require.Contains(t, d.Message, `node "n" has 1;`)
		idx, _, err = n.Place(Request{MemoryMB: 30000, GPUs: 1})
		require.NoError(t, err)
		require.Equal(t, []int{0}, idx)
		_, _, err = n.Place(Request{MemoryMB: 10000, GPUs: 5})
		d, _ = IsDenial(err)
		require.Equal(t, ReasonNoCapacity, d.Reason)
		require.Contains(t, d.Message, "needs 5 GPUs")

		whole := newNodeLock("n", []store.GPUCapacity{gpu(0, 81920, 0, 0, now), gpu(1, 40960, 0, 0, now)}, now, cfg)
		idx, mb, err = whole.Place(Request{MemoryMB: 1, GPUs: 2, Exclusive: true})
		require.NoError(t, err)
		require.Equal(t, []int{1, 0}, idx)
		require.EqualValues(t, 40960-512, mb, "the whole of the smaller GPU on each: never more than a GPU has")
		_, _, err = whole.Place(Request{MemoryMB: 1})
		require.Error(t, err, "nothing beside an exclusive lease")
	})
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	require.True(t, CanTransition(store.LeaseActive, store.LeaseReleased))
	require.True(t, CanTransition(store.LeaseActive, store.LeaseExpired))
	for _, from := range []store.LeaseStatus{store.LeaseReleased, store.LeaseExpired} {
		for _, to := range []store.LeaseStatus{store.LeaseActive, store.LeaseReleased, store.LeaseExpired} {
			require.False(t, CanTransition(from, to), "%s -> %s: an ended lease never comes back", from, to)
		}
	}
}
