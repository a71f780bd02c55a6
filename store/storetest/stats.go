package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// RunStats checks a driver's store.StatsReader. The counts are over the whole database, so
// open must return a store of its own (not the one Run shares between subtests).
func RunStats(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	sr, ok := s.(store.StatsReader)
	require.True(t, ok, "the driver implements store.StatsReader")
	b := newBundle(s)
	ctx := t.Context()

	counts, err := sr.LeaseCountActive(ctx)
	require.NoError(t, err)
	require.Empty(t, counts, "no lease: no mode")

	released := b.lease("released", intp(1), 100)
	released.Status = store.LeaseReleased
	require.NoError(t, s.LeaseInsert(ctx, []store.Lease{
		b.lease("gpu-0", intp(0), 100), b.lease("gpu-1", intp(1), 100), b.lease("cpu", nil, 0), released,
	}))
	counts, err = sr.LeaseCountActive(ctx)
	require.NoError(t, err)
	require.Equal(t, map[store.LeaseMode]int64{store.LeaseGPU: 2, store.LeaseCPU: 1}, counts, "active leases only")
}
