package pools

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// registerStarted registers every worker the fake provisioner started for the pool.
func (b *bundle) registerStarted(t *testing.T, pool string) []string {
	t.Helper()
	ids := b.prov.startedIDs(pool)
	for _, id := range ids {
		b.register(t, id, pool)
	}
	return ids
}

func TestReconcilerScale(t *testing.T) {
	t.Parallel()

	t.Run("StartsDesiredThenRuns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.reconciler()
		b.createPool(t, "p", 3, 0)
		res := runOnce(t, r)
		require.Equal(t, 3, res.Started)
		require.Equal(t, 3, b.pool(t, "p").SpawnedWorkers, "started processes count as spawned")
		require.Equal(t, store.PoolStarting, b.pool(t, "p").Status, "none registered yet")

		res = runOnce(t, r)
		require.Zero(t, res.Started, "processes not registered yet are not started twice")
		b.registerStarted(t, "p")
		res = runOnce(t, r)
		require.Equal(t, []string{"p:starting->running"}, res.Transitions)
		require.Zero(t, res.Started)
	})

	t.Run("CrashedWorkerIsReplaced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.reconciler()
		b.createPool(t, "p", 3, 0)
		runOnce(t, r)
		ids := b.registerStarted(t, "p")
		runOnce(t, r)

		b.prov.exit(ids[1], -1, "killed") // kill -9
		res := runOnce(t, r)
		require.Equal(t, 1, res.Offline)
		require.Equal(t, 1, res.Started)
		require.Equal(t, store.WorkerOffline, b.worker(t, ids[1]).Status)
		require.Len(t, b.prov.startedIDs("p"), 4)
		require.Contains(t, b.auditTypes(t, "p"), EventWorkerOffline)
		require.Equal(t, store.PoolRunning, b.pool(t, "p").Status, "a running pool stays running")
	})

	t.Run("BackingOffStartsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.reconciler()
		b.prov.backoff = true
		b.createPool(t, "p", 2, 0)
		res := runOnce(t, r)
		require.Zero(t, res.Started)
		require.Zero(t, b.pool(t, "p").SpawnedWorkers)
	})

	t.Run("ScaleDownDrainsIdleWorkersFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.reconciler()
		b.createPool(t, "p", 3, 0)
		runOnce(t, r)
		ids := b.registerStarted(t, "p")
		runOnce(t, r)
		busy := ids[0]
		b.beat(t, busy, store.WorkerExecuting, 2, 2)

		_, err := b.svc.CreatePool(t.Context(), CreateParams{PoolID: "p", Agent: "chat", ModelID: "mistral-7b",
			Adapter: "vllm", Types: []string{"noop"}, DesiredWorkers: 1, Actor: "admin:t"})
		require.NoError(t, err)
		res := runOnce(t, r)
		require.Equal(t, 2, res.Instructed)
		require.Equal(t, 2, res.Stopped)
		require.Equal(t, store.InstructionNone, b.worker(t, busy).Instruction, "the busy worker stays")
		for _, id := range ids[1:] {
			require.Equal(t, store.InstructionDrain, b.worker(t, id).Instruction)
			require.Equal(t, store.InstructionDrain, b.beat(t, id, store.WorkerDraining, 0, 0).Instruction)
		}
		require.Equal(t, 1, b.pool(t, "p").SpawnedWorkers)
		res = runOnce(t, r)
		require.Zero(t, res.Started+res.Stopped+res.Instructed, "draining workers are not replaced nor stopped twice")

		// A victim that overstays the drain grace is killed.
		b.clock.Advance(time.Minute)
		b.beat(t, busy, store.WorkerExecuting, 2, 2)
		res = runOnce(t, r)
		require.Equal(t, 2, res.Killed)
	})

	t.Run("UnregisteredWorkerKilledAfterStartTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.reconciler()
		b.createPool(t, "p", 1, 0)
		runOnce(t, r)
		b.clock.Advance(31 * time.Second)
		res := runOnce(t, r)
		require.Equal(t, 1, res.Killed)
		require.Equal(t, 1, res.Started, "and replaced")
	})

	t.Run("ExternalOnlyReports", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.prov.managed = false
		r := b.reconciler()
		b.createPool(t, "p", 2, 0)
		res := runOnce(t, r)
		require.Zero(t, res.Started)
		b.register(t, "k8s-a", "p")
		b.register(t, "k8s-b", "p")
		b.register(t, "k8s-c", "p") // KEDA scaled beyond desired: not ours to stop
		res = runOnce(t, r)
		require.Equal(t, []string{"p:starting->running"}, res.Transitions)
		require.Zero(t, res.Instructed)
		require.Equal(t, 3, b.pool(t, "p").SpawnedWorkers)
	})
}

func TestReconcilerAdoptsAfterRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createPool(t, "p", 3, 0)
	runOnce(t, b.reconciler())
	ids := b.registerStarted(t, "p")

	// The orchestrator dies; its successor starts 20s later, with a provisioner that knows no
	// process, and finds three registered workers whose last heartbeats are 20s old.
	b.clock.Advance(20 * time.Second)
	b.prov = newFakeProvisioner(b.clock)
	r := b.reconciler()
	res := runOnce(t, r)
	require.Zero(t, res.Started, "registered workers are adopted, not duplicated")
	require.Zero(t, res.Offline, "nobody is judged during the adoption window")
	require.Equal(t, []string{"p:starting->running"}, res.Transitions)

	// Two come back; the third died with the old orchestrator and is replaced after the window.
	b.clock.Advance(10 * time.Second)
	b.beat(t, ids[0], store.WorkerIdle, 0, 0)
	b.beat(t, ids[1], store.WorkerIdle, 0, 0)
	b.clock.Advance(6 * time.Second)
	res = runOnce(t, r)
	require.Equal(t, 1, res.Offline)
	require.Equal(t, 1, res.Started)
	require.Equal(t, store.WorkerOffline, b.worker(t, ids[2]).Status)
}

func TestReconcilerHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.reconciler()
	b.createPool(t, "p", 1, 10)
	runOnce(t, r)
	ids := b.registerStarted(t, "p")
	runOnce(t, r)

	// Work and agent heartbeats keep the pool; so does a job in flight, however long.
	b.clock.Advance(8 * time.Second)
	b.beat(t, ids[0], store.WorkerExecuting, 1, 1)
	b.clock.Advance(8 * time.Second)
	_, err := b.svc.HeartbeatPool(t.Context(), "p")
	require.NoError(t, err)
	b.clock.Advance(8 * time.Second)
	require.Empty(t, runOnce(t, r).Transitions)
	b.clock.Advance(30 * time.Second)
	b.beat(t, ids[0], store.WorkerExecuting, 1, 1)
	require.Empty(t, runOnce(t, r).Transitions, "a job in flight keeps the pool")

	// Idle past the hold: draining, then stopped once the worker left.
	b.beat(t, ids[0], store.WorkerIdle, 0, 1)
	b.clock.Advance(11 * time.Second)
	b.beat(t, ids[0], store.WorkerIdle, 0, 1)
	res := runOnce(t, r)
	require.Equal(t, []string{"p:running->draining"}, res.Transitions)
	require.Contains(t, b.pool(t, "p").StatusReason, "hold expired")
	require.Equal(t, store.InstructionDrain, b.beat(t, ids[0], store.WorkerIdle, 0, 1).Instruction)
	require.Equal(t, 1, res.Stopped)

	require.NoError(t, b.svc.DeregisterWorker(t.Context(), ids[0]))
	b.prov.exit(ids[0], 0, "")
	res = runOnce(t, r)
	require.Equal(t, []string{"p:draining->stopped"}, res.Transitions)
	require.Equal(t, 0, b.pool(t, "p").SpawnedWorkers)
	require.Equal(t, []string{"pool.created", "pool.starting->running", "pool.running->draining", "pool.draining->stopped"},
		slices.DeleteFunc(b.auditTypes(t, "p"), func(e string) bool { return e[:6] == "worker" }))
}

func TestReconcilerDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.reconciler()
	b.createPool(t, "p", 2, 0)
	runOnce(t, r)
	ids := b.registerStarted(t, "p")
	_, _, err := b.svc.DrainPool(t.Context(), "p", "admin:t")
	require.NoError(t, err)

	res := runOnce(t, r)
	require.Equal(t, 2, res.Stopped, "local workers get SIGTERM")
	require.Zero(t, res.Started, "a draining pool starts nothing")
	require.Empty(t, res.Transitions, "workers are still there")

	// One leaves cleanly; the other overstays the drain grace: told to stop, killed.
	require.NoError(t, b.svc.DeregisterWorker(t.Context(), ids[0]))
	b.prov.exit(ids[0], 0, "")
	b.clock.Advance(61 * time.Second)
	b.beat(t, ids[1], store.WorkerDraining, 1, 1)
	res = runOnce(t, r)
	require.Equal(t, 1, res.Killed)
	require.Equal(t, store.InstructionStop, b.worker(t, ids[1]).Instruction)
	res = runOnce(t, r) // the killed process's row is marked offline
	require.Equal(t, 1, res.Offline)
	require.Equal(t, []string{"p:draining->stopped"}, res.Transitions)
}

func TestReconcilerEvict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	r := b.reconciler()
	b.createPool(t, "p", 1, 0)
	runOnce(t, r)
	ids := b.registerStarted(t, "p")

	// The pool's worker holds a job.
	job, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: "j1", Type: "noop", Agent: "chat", Payload: []byte(`{}`), MaxAttempts: 3})
	require.NoError(t, err)
	claim, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: ids[0], PoolID: "p", NodeID: "node-1",
		Items: []engine.ClaimItem{{JobID: job.ID}}})
	require.NoError(t, err)
	require.Len(t, claim.Claimed, 1)

	_, _, err = b.svc.EvictPool(ctx, "p", "admin:t")
	require.NoError(t, err)
	res := runOnce(t, r)
	require.Equal(t, 1, res.Rescued)
	require.Equal(t, 1, res.Stopped)
	got, err := b.st.JobGet(ctx, "j1")
	require.NoError(t, err)
	require.Equal(t, store.JobPending, got.Status, "retried elsewhere")
	require.Equal(t, ReasonEvicted, got.LastError)
	require.True(t, leases.InJobRow(claim.Leases["j1"].Token), "a job without a GPU holds its lease in its row")
	require.Empty(t, got.LeaseToken, "its lease ended with the attempt")

	// SIGKILL after the evict grace; then nothing is left.
	b.clock.Advance(6 * time.Second)
	res = runOnce(t, r)
	require.Equal(t, 1, res.Killed)
	runOnce(t, r)
	p := b.pool(t, "p")
	require.Equal(t, store.PoolEvicted, p.Status)
	require.Zero(t, p.SpawnedWorkers)
}

func TestReconcilerFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createPool(t, "p", 2, 0)
	r := b.reconciler()
	r.cfg.Fence = func(context.Context, store.Tx) error { return store.ErrFenced }
	_, err := r.runOnce(t.Context())
	require.True(t, errors.Is(err, store.ErrFenced), "got %v", err)
	started, _, _ := b.prov.counts()
	require.Zero(t, started, "a deposed leader starts nothing")
}
