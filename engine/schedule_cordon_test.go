package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// TestScheduleCordon, on MariaDB and on SQLite: no job is placed on a cordoned node; a job
// whose only candidate node is cordoned waits "cordoned: …" (not no_worker); a job placed
// there before the cordon is still claimed; after the uncordon the waiting job is placed.
func TestScheduleCordon(t *testing.T) {
	t.Parallel()
	onBothStores(t, testScheduleCordon)
}

func testScheduleCordon(t *testing.T, b *bundle) {
	ctx := context.Background()
	b.gpuType(10000, 3)
	b.report(t, "a", 81920)
	b.report(t, "b", 81920)
	b.worker(t, "w-a", "a")
	b.worker(t, "w-b", "b")
	for _, n := range []string{"a", "b"} {
		require.NoError(t, b.store.NodeUpsert(ctx, n, nil, b.clock.Now()))
	}

	// Placed on "a" before the cordon (best fit, ties to the first node).
	b.submitGPU(t, "before", nil)
	res := b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.Len(t, res.Placed, 1)
	require.Equal(t, "a", res.Placed[0].Node)

	_, err := b.store.NodeSetCordon(ctx, "a", true, "maintenance", "admin", b.clock.Now())
	require.NoError(t, err)

	// New jobs go to "b" only, though "a" would be the best fit.
	for _, id := range []string{"j1", "j2"} {
		b.submitGPU(t, id, nil)
	}
	res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.Len(t, res.Placed, 2)
	for _, p := range res.Placed {
		require.Equal(t, "b", p.Node, "job %s", p.JobID)
	}

	// The job placed before the cordon is still claimed on its node.
	c := b.claimOn(t, "w-a", "a", "before")
	require.Len(t, c.Claimed, 1)

	// With "b" cordoned too, a new job's only candidates are cordoned.
	_, err = b.store.NodeSetCordon(ctx, "b", true, "", "admin", b.clock.Now())
	require.NoError(t, err)
	b.submitGPU(t, "j3", nil)
	res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.Empty(t, res.Placed)
	require.Equal(t, map[string]int{engine.ReasonCordoned: 1}, res.Waiting)
	j3 := b.job(t, "j3")
	require.True(t, strings.HasPrefix(j3.WaitingReason, engine.ReasonCordoned+":"), j3.WaitingReason)
	require.Contains(t, j3.WaitingReason, "a, b")

	// A job only a cordoned node could ever hold waits cordoned too, not unsatisfiable.
	b.report(t, "c", 24576)
	b.worker(t, "w-c", "c")
	b.submitGPU(t, "big", &engine.Resources{GPUMemoryMB: 60000})
	res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.True(t, strings.HasPrefix(b.job(t, "big").WaitingReason, engine.ReasonCordoned+":"), b.job(t, "big").WaitingReason)
	// j3 fits on "c" now.
	require.Len(t, res.Placed, 1)
	require.Equal(t, "c", res.Placed[0].Node)

	// After the uncordon the waiting job is placed.
	_, err = b.store.NodeSetCordon(ctx, "a", false, "", "admin", b.clock.Now())
	require.NoError(t, err)
	res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.Len(t, res.Placed, 1)
	require.Equal(t, "big", res.Placed[0].JobID)
	require.Equal(t, "a", res.Placed[0].Node)
	big := b.job(t, "big")
	require.Equal(t, "a", big.PlacedNode)
	require.Empty(t, big.WaitingReason)
	require.Equal(t, store.JobPending, big.Status)
}
