package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testPools runs the conformance tests of worker_pools and workers, each on its own rows (pool
// and worker ids carry the subtest's prefix). WorkerDeleteOffline selects by heartbeat age
// alone, so its subtest uses instants older than any other subtest's workers.
func testPools(t *testing.T, parent *bundle) {
	runAll(t, parent.s, []subtest{
		{"InsertGetList", testPoolInsertGetList},
		{"UpdateCompareAndSet", testPoolUpdateCAS},
		{"Touch", testPoolTouch},
		{"WorkerRegisterAndList", testWorkerRegisterAndList},
		{"WorkerUpdate", testWorkerUpdate},
		{"WorkerMarkOffline", testWorkerMarkOffline},
		{"WorkerDelete", testWorkerDelete},
		{"JobsInFlightByPool", testJobsInFlightByPool},
	})
}

// pool returns a starting pool of the subtest.
func (b *bundle) pool(name string) store.Pool {
	return store.Pool{
		ID: b.prefix + name, Agent: b.agent(), ModelID: "mistral-7b", Adapter: "vllm", Variant: "q4",
		Types: []string{"inference", "preload"}, DesiredWorkers: 2, Status: store.PoolStarting,
		StatusChangedAt: b.now, HoldSeconds: 300, CreatedAt: b.now, UpdatedAt: b.now, StartedAt: b.now,
		Metadata: json.RawMessage(`{"team": "nlp"}`),
	}
}

// worker returns an idle worker of the subtest in pool, last heard of at hb.
func (b *bundle) worker(name, pool string, hb time.Time) store.Worker {
	return store.Worker{
		ID: b.prefix + name, PoolID: pool, NodeID: "node-1", Hostname: "gpu-host", PID: 4242,
		Types: []string{"inference"}, Concurrency: 4, Status: store.WorkerIdle, RegisteredAt: hb,
		LastHeartbeat: hb,
	}
}

// requireSamePool compares pools field by field, times at microsecond precision.
func requireSamePool(t *testing.T, want, got store.Pool) {
	t.Helper()
	requireTime(t, want.StatusChangedAt, got.StatusChangedAt, "status_changed_at")
	requireTime(t, want.CreatedAt, got.CreatedAt, "created_at")
	requireTime(t, want.UpdatedAt, got.UpdatedAt, "updated_at")
	requireTime(t, want.StartedAt, got.StartedAt, "started_at")
	requireTimePtr(t, want.LastHeartbeat, got.LastHeartbeat, "last_heartbeat")
	requireTimePtr(t, want.LastActivityAt, got.LastActivityAt, "last_activity_at")
	if want.Metadata != nil {
		require.JSONEq(t, string(want.Metadata), string(got.Metadata))
	} else {
		require.Nil(t, got.Metadata)
	}
	want.StatusChangedAt, want.CreatedAt, want.UpdatedAt, want.StartedAt = got.StatusChangedAt, got.CreatedAt, got.UpdatedAt, got.StartedAt
	want.LastHeartbeat, want.LastActivityAt, want.Metadata = got.LastHeartbeat, got.LastActivityAt, got.Metadata
	require.Equal(t, want, got)
}

func (b *bundle) poolsOfSubtest(pools []store.Pool) []string {
	var out []string
	for _, p := range pools {
		if strings.HasPrefix(p.ID, b.prefix) {
			out = append(out, p.ID)
		}
	}
	return out
}

func testPoolInsertGetList(t *testing.T, b *bundle) {
	ctx := t.Context()
	a := b.pool("a")
	require.NoError(t, b.s.PoolInsert(ctx, a))
	got, err := b.s.PoolGet(ctx, a.ID, false)
	require.NoError(t, err)
	requireSamePool(t, a, got)

	require.ErrorIs(t, b.s.PoolInsert(ctx, a), store.ErrConflict, "pool_id is unique")
	_, err = b.s.PoolGet(ctx, b.prefix+"missing", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.s.PoolGet(ctx, "pöol", false)
	require.ErrorIs(t, err, store.ErrNotFound)

	plain := b.pool("b")
	plain.Types, plain.Metadata, plain.Status = nil, nil, store.PoolStopped
	require.NoError(t, b.s.PoolInsert(ctx, plain))
	got, err = b.s.PoolGet(ctx, plain.ID, false)
	require.NoError(t, err)
	require.Equal(t, []string{}, got.Types, "no types reads back as an empty list")
	require.Nil(t, got.Metadata)

	all, err := b.s.PoolList(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{a.ID, plain.ID}, b.poolsOfSubtest(all), "by pool_id")
	live, err := b.s.PoolList(ctx, store.PoolStarting, store.PoolRunning)
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, b.poolsOfSubtest(live))
}

func testPoolUpdateCAS(t *testing.T, b *bundle) {
	ctx := t.Context()
	p := b.pool("p")
	require.NoError(t, b.s.PoolInsert(ctx, p))
	later := b.now.Add(time.Minute)

	// Spawned count only: the status stays, and so does status_changed_at.
	n := 2
	require.NoError(t, b.s.PoolUpdate(ctx, store.PoolUpdate{ID: p.ID, From: store.PoolStarting, To: store.PoolStarting, SpawnedWorkers: &n, Now: later}))
	got, err := b.s.PoolGet(ctx, p.ID, false)
	require.NoError(t, err)
	require.Equal(t, 2, got.SpawnedWorkers)
	requireTime(t, b.now, got.StatusChangedAt, "unchanged status keeps status_changed_at")
	requireTime(t, later, got.UpdatedAt, "updated_at")

	// A transition with a reason.
	reason := "hold expired"
	require.NoError(t, b.s.PoolUpdate(ctx, store.PoolUpdate{ID: p.ID, From: store.PoolStarting, To: store.PoolDraining, StatusReason: &reason, Now: later}))
	got, err = b.s.PoolGet(ctx, p.ID, true)
	require.NoError(t, err)
	require.Equal(t, store.PoolDraining, got.Status)
	require.Equal(t, reason, got.StatusReason)
	requireTime(t, later, got.StatusChangedAt, "status_changed_at")

	// A stale From is a conflict and writes nothing; a missing pool is not found.
	err = b.s.PoolUpdate(ctx, store.PoolUpdate{ID: p.ID, From: store.PoolRunning, To: store.PoolStopped, Now: later})
	require.ErrorIs(t, err, store.ErrConflict)
	err = b.s.PoolUpdate(ctx, store.PoolUpdate{ID: b.prefix + "nope", From: store.PoolRunning, To: store.PoolStopped, Now: later})
	require.ErrorIs(t, err, store.ErrNotFound)

	// A new spec replaces the old one as a whole, and the pool restarts.
	spec := store.PoolSpec{Agent: "other", ModelID: "llama", Types: []string{"ingest"}, DesiredWorkers: 5, HoldSeconds: 0}
	restart := later.Add(time.Minute)
	require.NoError(t, b.s.PoolUpdate(ctx, store.PoolUpdate{ID: p.ID, From: store.PoolDraining, To: store.PoolStarting, Spec: &spec, StartedAt: &restart, Now: restart}))
	got, err = b.s.PoolGet(ctx, p.ID, false)
	require.NoError(t, err)
	require.Equal(t, "other", got.Agent)
	require.Equal(t, "llama", got.ModelID)
	require.Empty(t, got.Adapter)
	require.Empty(t, got.Variant)
	require.Equal(t, []string{"ingest"}, got.Types)
	require.Equal(t, 5, got.DesiredWorkers)
	require.Zero(t, got.HoldSeconds)
	require.Nil(t, got.Metadata)
	requireTime(t, restart, got.StartedAt, "started_at")
}

func testPoolTouch(t *testing.T, b *bundle) {
	ctx := t.Context()
	p := b.pool("t")
	require.NoError(t, b.s.PoolInsert(ctx, p))
	at := b.now.Add(time.Second)
	require.NoError(t, b.s.PoolTouch(ctx, p.ID, true, at))
	require.NoError(t, b.s.PoolTouch(ctx, p.ID, false, at.Add(time.Second)))
	require.NoError(t, b.s.PoolTouch(ctx, p.ID, true, b.now), "an older heartbeat does not move it back")
	got, err := b.s.PoolGet(ctx, p.ID, false)
	require.NoError(t, err)
	requireTimePtr(t, &at, got.LastHeartbeat, "last_heartbeat")
	active := at.Add(time.Second)
	requireTimePtr(t, &active, got.LastActivityAt, "last_activity_at")
	require.ErrorIs(t, b.s.PoolTouch(ctx, b.prefix+"nope", true, at), store.ErrNotFound)
}

func testWorkerRegisterAndList(t *testing.T, b *bundle) {
	ctx := t.Context()
	pool := b.prefix + "pool"
	w1 := b.worker("w1", pool, b.now)
	w1.Telemetry = json.RawMessage(`{"node_id": "node-1", "gpus": []}`)
	w2 := b.worker("w2", pool, b.now)
	other := b.worker("w3", b.prefix+"other", b.now)
	for _, w := range []store.Worker{w2, w1, other} {
		require.NoError(t, b.s.WorkerUpsert(ctx, w))
	}
	got, err := b.s.WorkerGet(ctx, w1.ID, false)
	require.NoError(t, err)
	requireTime(t, w1.RegisteredAt, got.RegisteredAt, "registered_at")
	requireTime(t, w1.LastHeartbeat, got.LastHeartbeat, "last_heartbeat")
	require.JSONEq(t, string(w1.Telemetry), string(got.Telemetry))
	w1.RegisteredAt, w1.LastHeartbeat, w1.Telemetry = got.RegisteredAt, got.LastHeartbeat, got.Telemetry
	require.Equal(t, w1, got)

	// Registering again is a new life: everything is replaced.
	again := b.worker("w1", pool, b.now.Add(time.Minute))
	again.PID, again.Instruction, again.JobsClaimed = 99, store.InstructionNone, 0
	require.NoError(t, b.s.WorkerUpdate(ctx, store.WorkerUpdate{ID: w1.ID, Instruction: new(store.InstructionDrain)}))
	require.NoError(t, b.s.WorkerUpsert(ctx, again))
	got, err = b.s.WorkerGet(ctx, w1.ID, true)
	require.NoError(t, err)
	require.Equal(t, 99, got.PID)
	require.Equal(t, store.InstructionNone, got.Instruction)
	require.Nil(t, got.Telemetry)

	ws, err := b.s.WorkerList(ctx, pool, false)
	require.NoError(t, err)
	require.Len(t, ws, 2)
	require.Equal(t, []string{w1.ID, w2.ID}, []string{ws[0].ID, ws[1].ID}, "by worker_id")
	all, err := b.s.WorkerList(ctx, "", true)
	require.NoError(t, err)
	n := 0
	for _, w := range all {
		if strings.HasPrefix(w.ID, b.prefix) {
			n++
		}
	}
	require.Equal(t, 3, n)
	_, err = b.s.WorkerGet(ctx, b.prefix+"nope", false)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testWorkerUpdate(t *testing.T, b *bundle) {
	ctx := t.Context()
	w := b.worker("w", "", b.now)
	require.NoError(t, b.s.WorkerUpsert(ctx, w))
	hb, active := b.now.Add(5*time.Second), b.now.Add(4*time.Second)
	require.NoError(t, b.s.WorkerUpdate(ctx, store.WorkerUpdate{
		ID: w.ID, Status: new(store.WorkerExecuting), InFlight: new(3), JobsClaimed: new(int64(17)),
		Telemetry: json.RawMessage(`{"gpus": [1]}`), LastHeartbeat: &hb, LastActiveAt: &active,
	}))
	got, err := b.s.WorkerGet(ctx, w.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.WorkerExecuting, got.Status)
	require.Equal(t, 3, got.InFlight)
	require.EqualValues(t, 17, got.JobsClaimed)
	require.JSONEq(t, `{"gpus": [1]}`, string(got.Telemetry))
	requireTime(t, hb, got.LastHeartbeat)
	requireTimePtr(t, &active, got.LastActiveAt)
	require.Equal(t, store.InstructionNone, got.Instruction, "nil fields are left alone")

	require.NoError(t, b.s.WorkerUpdate(ctx, store.WorkerUpdate{ID: w.ID, Instruction: new(store.InstructionStop)}))
	got, err = b.s.WorkerGet(ctx, w.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.InstructionStop, got.Instruction)
	require.Equal(t, 3, got.InFlight)
	require.ErrorIs(t, b.s.WorkerUpdate(ctx, store.WorkerUpdate{ID: b.prefix + "nope", InFlight: new(1)}), store.ErrNotFound)
}

func testWorkerMarkOffline(t *testing.T, b *bundle) {
	ctx := t.Context()
	// Instants years before b.now: no other subtest has workers this old.
	base := b.now.AddDate(-7, 0, 0)
	stale := b.worker("stale", "", base)
	fresh := b.worker("fresh", "", base.Add(time.Hour))
	named := b.worker("named", "", base.Add(2*time.Hour))
	for _, w := range []store.Worker{stale, fresh, named} {
		require.NoError(t, b.s.WorkerUpsert(ctx, w))
	}
	all := []string{stale.ID, fresh.ID, named.ID}
	ids, err := b.s.WorkerMarkOffline(ctx, store.WorkerOfflineParams{IDs: all, HeartbeatBefore: base.Add(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, []string{stale.ID}, ids, "only those silent since before the bound")
	got, err := b.s.WorkerGet(ctx, stale.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.WorkerOffline, got.Status)
	require.Zero(t, got.InFlight)

	ids, err = b.s.WorkerMarkOffline(ctx, store.WorkerOfflineParams{IDs: all, HeartbeatBefore: base.Add(time.Minute)})
	require.NoError(t, err)
	require.Empty(t, ids, "an offline worker is not marked twice")

	// Only those among IDs, whatever their age under the bound.
	ids, err = b.s.WorkerMarkOffline(ctx, store.WorkerOfflineParams{IDs: []string{named.ID, b.prefix + "nope"}, HeartbeatBefore: b.now.AddDate(1, 0, 0)})
	require.NoError(t, err)
	require.Equal(t, []string{named.ID}, ids)
	ids, err = b.s.WorkerMarkOffline(ctx, store.WorkerOfflineParams{HeartbeatBefore: b.now.AddDate(1, 0, 0)})
	require.NoError(t, err)
	require.Empty(t, ids, "no ids select nothing")
	got, err = b.s.WorkerGet(ctx, fresh.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.WorkerIdle, got.Status)
}

func testWorkerDelete(t *testing.T, b *bundle) {
	ctx := t.Context()
	// Older than any other subtest's workers: WorkerDeleteOffline's bound sees only these.
	base := b.now.AddDate(-20, 0, 0)
	gone := b.worker("gone", "", base)
	old := b.worker("old", "", base)
	live := b.worker("live", "", base)
	for _, w := range []store.Worker{gone, old, live} {
		require.NoError(t, b.s.WorkerUpsert(ctx, w))
	}
	require.NoError(t, b.s.WorkerDelete(ctx, gone.ID))
	require.ErrorIs(t, b.s.WorkerDelete(ctx, gone.ID), store.ErrNotFound)

	_, err := b.s.WorkerMarkOffline(ctx, store.WorkerOfflineParams{IDs: []string{old.ID}, HeartbeatBefore: b.now})
	require.NoError(t, err)
	n, err := b.s.WorkerDeleteOffline(ctx, base.Add(time.Second), 100)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only offline workers are forgotten")
	_, err = b.s.WorkerGet(ctx, old.ID, false)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.s.WorkerGet(ctx, live.ID, false)
	require.NoError(t, err)
}

func testJobsInFlightByPool(t *testing.T, b *bundle) {
	ctx := t.Context()
	pool, other := b.prefix+"pool", b.prefix+"other"
	claim := func(id, owner string, to store.JobStatus) {
		b.insert(t, id)
		require.NoError(t, b.update(t, store.JobUpdate{ID: b.id(id), From: store.JobPending, To: store.JobClaimed, OwnerPool: &owner}))
		if to != store.JobClaimed {
			require.NoError(t, b.update(t, store.JobUpdate{ID: b.id(id), From: store.JobClaimed, To: to}))
		}
	}
	claim("c", pool, store.JobClaimed)
	claim("r", pool, store.JobRunning)
	claim("d", pool, store.JobCancelled)
	claim("o", other, store.JobRunning)
	b.insert(t, "p")

	jobs, err := b.s.JobListInFlightByPool(ctx, pool, 10)
	require.NoError(t, err)
	require.Equal(t, []string{b.id("c"), b.id("r")}, ids(jobs))
	require.Nil(t, jobs[0].Payload, "a rescue needs no payload: none is read")
	jobs, err = b.s.JobListInFlightByPool(ctx, pool, 1)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
}
