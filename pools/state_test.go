package pools

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

func TestCanTransition(t *testing.T) {
	t.Parallel()
	allowed := map[[2]store.PoolStatus]bool{
		{store.PoolStarting, store.PoolRunning}:  true,
		{store.PoolStarting, store.PoolDraining}: true,
		{store.PoolStarting, store.PoolEvicted}:  true,
		{store.PoolRunning, store.PoolDraining}:  true,
		{store.PoolRunning, store.PoolEvicted}:   true,
		{store.PoolDraining, store.PoolStopped}:  true,
		{store.PoolDraining, store.PoolEvicted}:  true,
		{store.PoolDraining, store.PoolStarting}: true,
		{store.PoolStopped, store.PoolStarting}:  true,
		{store.PoolEvicted, store.PoolStarting}:  true,
	}
	for _, from := range store.PoolStatuses {
		for _, to := range store.PoolStatuses {
			require.Equal(t, allowed[[2]store.PoolStatus{from, to}], CanTransition(from, to), "%s -> %s", from, to)
		}
	}
	for from := range transitions {
		require.True(t, from.Valid(), "the table names only known states: %s", from)
	}
}

func TestTransition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.createPool(t, "tr", 1, 0)
	now := b.clock.Now().Add(time.Second)

	t.Run("AppliesAndAudits", func(t *testing.T) {
		ev, err := Transition(t.Context(), b.st, Change{Pool: &p, To: store.PoolRunning, Reason: "all live",
			Now: now, Actor: "leader", Details: map[string]any{"workers": 1}})
		require.NoError(t, err)
		require.Equal(t, "pool.starting->running", ev.EventType)
		require.Equal(t, "tr", ev.PoolID)
		require.Equal(t, "leader", ev.Actor)
		var details map[string]any
		require.NoError(t, json.Unmarshal(ev.Details, &details))
		require.Equal(t, map[string]any{"workers": float64(1), "reason": "all live"}, details)
		require.Equal(t, store.PoolRunning, p.Status, "updated in memory")
		got := b.pool(t, "tr")
		require.Equal(t, store.PoolRunning, got.Status)
		require.Equal(t, "all live", got.StatusReason)
		require.True(t, now.Equal(got.StatusChangedAt))
	})

	t.Run("IllegalMoveWritesNothing", func(t *testing.T) {
		cur := b.pool(t, "tr")
		_, err := Transition(t.Context(), b.st, Change{Pool: &cur, To: store.PoolStopped, Now: now, Actor: "leader"})
		require.ErrorIs(t, err, ErrIllegalTransition)
		require.Equal(t, store.PoolRunning, b.pool(t, "tr").Status)
	})

	t.Run("StaleRowIsConflict", func(t *testing.T) {
		stale := b.pool(t, "tr")
		stale.Status = store.PoolStarting // another writer moved it on since this copy was read
		_, err := Transition(t.Context(), b.st, Change{Pool: &stale, To: store.PoolDraining, Now: now, Actor: "leader"})
		require.ErrorIs(t, err, store.ErrConflict)
	})
}

func TestInstructions(t *testing.T) {
	t.Parallel()
	require.Equal(t, store.InstructionNone, impliedInstruction(store.PoolRunning))
	require.Equal(t, store.InstructionNone, impliedInstruction(store.PoolStarting))
	require.Equal(t, store.InstructionDrain, impliedInstruction(store.PoolDraining))
	require.Equal(t, store.InstructionDrain, impliedInstruction(store.PoolStopped))
	require.Equal(t, store.InstructionStop, impliedInstruction(store.PoolEvicted))
	require.Equal(t, store.InstructionStop, stronger(store.InstructionStop, store.InstructionDrain), "never lowered")
	require.Equal(t, store.InstructionDrain, stronger(store.InstructionNone, store.InstructionDrain))
}
