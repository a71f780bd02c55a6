package pools

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

func TestCreatePool(t *testing.T) {
	t.Parallel()

	t.Run("IdempotentThenUpdatedThenRestarted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := t.Context()
		params := CreateParams{PoolID: "mistral", Agent: "chat", ModelID: "mistral-7b", Adapter: "vllm",
			Types: []string{"preload", "inference"}, DesiredWorkers: 2, HoldSeconds: 600,
			Metadata: json.RawMessage(`{"team": "nlp"}`), Actor: "admin:t"}
		res, err := b.svc.CreatePool(ctx, params)
		require.NoError(t, err)
		require.True(t, res.Created)
		require.Equal(t, store.PoolStarting, res.Pool.Status)
		require.Equal(t, []string{"inference", "preload"}, res.Pool.Types, "types are kept sorted")
		require.NotEmpty(t, res.PreloadID)

		params.Metadata = json.RawMessage(`{ "team":"nlp" }`) // the same JSON, spelled otherwise
		res, err = b.svc.CreatePool(ctx, params)
		require.NoError(t, err)
		require.False(t, res.Created)
		require.False(t, res.Updated, "the same spec again changes nothing")

		params.DesiredWorkers = 5
		res, err = b.svc.CreatePool(ctx, params)
		require.NoError(t, err)
		require.True(t, res.Updated)
		require.Equal(t, 5, b.pool(t, "mistral").DesiredWorkers)

		_, changed, err := b.svc.DrainPool(ctx, "mistral", "admin:t")
		require.NoError(t, err)
		require.True(t, changed)
		b.clock.Advance(time.Minute)
		res, err = b.svc.CreatePool(ctx, params)
		require.NoError(t, err)
		require.True(t, res.Updated)
		p := b.pool(t, "mistral")
		require.Equal(t, store.PoolStarting, p.Status, "posting a drained pool restarts it")
		require.True(t, b.clock.Now().Equal(p.StartedAt))

		require.Equal(t, []string{EventPoolCreated, EventPoolUpdated, "pool.starting->draining", "pool.draining->starting"},
			b.auditTypes(t, "mistral"))
		// Every post announces the pool, even one that changed nothing.
		preloads, err := b.sc.ListPreloads(ctx, 10)
		require.NoError(t, err)
		require.Len(t, preloads, 4)
		require.Equal(t, "mistral-7b", preloads[3].ModelID)
		require.Equal(t, 5, preloads[3].DesiredWorkers)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		good := CreateParams{PoolID: "p", Agent: "a", ModelID: "m", Types: []string{"noop"}, DesiredWorkers: 1}
		for _, tc := range []struct {
			field string
			mod   func(*CreateParams)
		}{
			{"pool_id", func(p *CreateParams) { p.PoolID = "" }},
			{"pool_id", func(p *CreateParams) { p.PoolID = "has space" }},
			{"agent_name", func(p *CreateParams) { p.Agent = "" }},
			{"model_id", func(p *CreateParams) { p.ModelID = "" }},
			{"types", func(p *CreateParams) { p.Types = nil }},
			{"types", func(p *CreateParams) { p.Types = []string{"nope"} }},
			{"types", func(p *CreateParams) { p.Types = []string{"noop", "noop"} }},
			{"desired_workers", func(p *CreateParams) { p.DesiredWorkers = -1 }},
			{"desired_workers", func(p *CreateParams) { p.DesiredWorkers = MaxDesiredWorkers + 1 }},
			{"hold_seconds", func(p *CreateParams) { p.HoldSeconds = -5 }},
			{"metadata", func(p *CreateParams) { p.Metadata = json.RawMessage(`[1]`) }},
		} {
			p := good
			tc.mod(&p)
			_, err := b.svc.CreatePool(t.Context(), p)
			var ve *engine.ValidationError
			require.True(t, errors.As(err, &ve), "%s: %v", tc.field, err)
			require.Equal(t, tc.field, ve.Field)
		}
		pools, err := b.svc.ListPools(t.Context())
		require.NoError(t, err)
		require.Empty(t, pools)
	})
}

func TestDrainAndEvict(t *testing.T) {
	t.Parallel()

	t.Run("DrainInstructsWorkers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.createPool(t, "d", 2, 0)
		b.register(t, "d-1", "d")
		b.register(t, "d-2", "d")
		p, changed, err := b.svc.DrainPool(t.Context(), "d", "admin:t")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, store.PoolDraining, p.Status)
		require.Equal(t, store.InstructionDrain, b.worker(t, "d-1").Instruction)
		require.Equal(t, store.InstructionDrain, b.beat(t, "d-2", store.WorkerIdle, 0, 0).Instruction)

		_, changed, err = b.svc.DrainPool(t.Context(), "d", "admin:t")
		require.NoError(t, err)
		require.False(t, changed, "draining twice changes nothing")
		_, _, err = b.svc.DrainPool(t.Context(), "missing", "admin:t")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("EvictInstructsStopAndCannotDrainAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.createPool(t, "e", 1, 0)
		b.register(t, "e-1", "e")
		p, changed, err := b.svc.EvictPool(t.Context(), "e", "admin:t")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, store.PoolEvicted, p.Status)
		require.Equal(t, store.InstructionStop, b.beat(t, "e-1", store.WorkerExecuting, 1, 1).Instruction)
		_, _, err = b.svc.DrainPool(t.Context(), "e", "admin:t")
		require.ErrorIs(t, err, ErrIllegalTransition)
		_, changed, err = b.svc.EvictPool(t.Context(), "e", "admin:t")
		require.NoError(t, err)
		require.False(t, changed)
	})

	t.Run("DrainAll", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.createPool(t, "a", 1, 0)
		b.createPool(t, "b", 1, 0)
		b.createPool(t, "c", 1, 0)
		_, _, err := b.svc.EvictPool(t.Context(), "c", "admin:t")
		require.NoError(t, err)
		drained, err := b.svc.DrainAll(t.Context(), "admin:t")
		require.NoError(t, err)
		require.Len(t, drained, 2)
		require.Equal(t, store.PoolEvicted, b.pool(t, "c").Status, "an evicted pool stays evicted")
	})
}

func TestPoolHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createPool(t, "h", 1, 60)
	b.clock.Advance(30 * time.Second)
	p, err := b.svc.HeartbeatPool(t.Context(), "h")
	require.NoError(t, err)
	require.NotNil(t, p.LastHeartbeat)
	require.True(t, b.clock.Now().Equal(*p.LastHeartbeat))
	_, err = b.svc.HeartbeatPool(t.Context(), "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
}
