package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
)

// gpuType adds a job type "gpu" needing mb of GPU memory, with attempts attempts and a short
// backoff.
func (b *bundle) gpuType(mb, attempts int) {
	b.cfg.JobTypes["gpu"] = &config.JobType{
		Name: "gpu", Stream: "gpu", Handler: "noop", MaxAttempts: attempts, Timeout: time.Minute, GPUMemoryMB: mb,
		Backoff: config.Backoff{Initial: time.Second, Multiplier: 2, Max: time.Minute},
	}
}

// report records the telemetry of node: GPUs of the given total memory, idle.
func (b *bundle) report(t *testing.T, node string, totals ...int64) {
	t.Helper()
	snap := telemetry.Snapshot{NodeID: node, Source: telemetry.SourceSimulated}
	for i, mb := range totals {
		snap.GPUs = append(snap.GPUs, telemetry.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i),
			MemoryTotalMB: mb, MemoryFreeMB: mb})
	}
	require.NoError(t, b.leases.RecordSnapshot(context.Background(), snap))
}

func (b *bundle) claimOn(t *testing.T, worker, node string, ids ...string) engine.ClaimResult {
	t.Helper()
	items := make([]engine.ClaimItem, len(ids))
	for i, id := range ids {
		items[i] = engine.ClaimItem{JobID: id, Stream: "gpu"}
	}
	res, err := b.eng.Claim(context.Background(), engine.ClaimParams{WorkerID: worker, NodeID: node, Items: items})
	require.NoError(t, err)
	return res
}

func (b *bundle) job(t *testing.T, id string) store.Job {
	t.Helper()
	j, err := b.eng.Get(context.Background(), id)
	require.NoError(t, err)
	return j
}

func TestClaimLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("GPUJobsArePlacedBestFitUntilFull", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.gpuType(10000, 3)
		node := uid("node")
		b.report(t, node, 24576, 16384) // free after the 512 MB margin: 24064 and 15872
		j1, j2, j3, j4 := b.submit(t, "gpu"), b.submit(t, "gpu"), b.submit(t, "gpu"), b.submit(t, "gpu")

		res := b.claimOn(t, "w1", node, j1.ID, j2.ID, j3.ID, j4.ID)
		require.Len(t, res.Claimed, 3)
		gpus := map[string]int{}
		for _, j := range res.Claimed {
			l := res.Leases[j.ID]
			require.Equal(t, store.LeaseGPU, l.Mode)
			require.EqualValues(t, 10000, l.MemoryMB)
			require.Equal(t, l.Token, j.LeaseToken)
			require.Equal(t, l.Token, b.job(t, j.ID).LeaseToken, "the job row carries the lease")
			gpus[j.ID] = *l.GPUIndex
		}
		require.Equal(t, 1, gpus[j1.ID], "best fit: the smaller GPU first")
		require.Equal(t, 0, gpus[j2.ID])
		require.Equal(t, 0, gpus[j3.ID])
		require.Equal(t, []engine.Refusal{{JobID: j4.ID, Reason: engine.RefusedRetryLater, Detail: "no_capacity"}}, res.Refused)
		left := b.job(t, j4.ID)
		require.Equal(t, store.JobPending, left.Status, "no room is not a failed attempt")
		require.Zero(t, left.Attempts)
		require.Contains(t, left.WaitingReason, "no_capacity: no GPU of node", "the denial is the job's waiting reason")
		require.Contains(t, left.WaitingReason, "has 10000 MB free")

		// Completing one frees its GPU memory for the waiting job.
		done, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: j2.ID, Attempt: 1, LeaseToken: res.Leases[j2.ID].Token, Done: true},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeDone, done.Outcomes[0].Outcome)
		res = b.claimOn(t, "w2", node, j4.ID)
		require.Len(t, res.Claimed, 1)
		require.Equal(t, 0, *res.Leases[j4.ID].GPUIndex)
		require.Empty(t, b.job(t, j4.ID).WaitingReason, "placed: no longer waiting")
	})

	t.Run("ReleasesTellTheirNode", func(t *testing.T) {
		// A completion or a claim that releases GPU leases names their node once it commits
		// (the wiring wakes that node's telemetry); CPU leases name none.
		t.Parallel()
		b := setup(t)
		b.gpuType(1000, 3)
		var mu sync.Mutex
		var freed []string
		eng := engine.New(b.store, b.streams, b.cfg, engine.Options{Now: b.clock.Now, Leases: b.leases,
			GPUFreed: func(node string) { mu.Lock(); defer mu.Unlock(); freed = append(freed, node) }})
		node := uid("node")
		b.report(t, node, 24576)
		gpu, gpu2, cpu := b.submit(t, "gpu"), b.submit(t, "gpu"), b.submit(t, "noop")
		res, err := eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", NodeID: node,
			Items: []engine.ClaimItem{{JobID: gpu.ID}, {JobID: cpu.ID}}})
		require.NoError(t, err)
		require.Len(t, res.Claimed, 2)
		done := func(j store.Job) engine.Result {
			return engine.Result{JobID: j.ID, Attempt: 1, LeaseToken: res.Leases[j.ID].Token, Done: true}
		}
		_, err = eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{done(cpu)}})
		require.NoError(t, err)
		mu.Lock()
		require.Empty(t, freed, "a CPU lease frees no GPU")
		mu.Unlock()
		// The GPU job's result rides with the next claim.
		_, err = eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", NodeID: node,
			Items: []engine.ClaimItem{{JobID: gpu2.ID}}, Results: []engine.Result{done(gpu)}})
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{node}, freed)
	})

	t.Run("HigherPriorityPlacedFirst", func(t *testing.T) {
		// Room for one: of a claim's jobs, the highest priority gets it, whatever the order.
		t.Parallel()
		b := setup(t)
		b.gpuType(16000, 3)
		node := uid("node")
		b.report(t, node, 24576)
		low := b.submit(t, "gpu")
		nine := 9
		high, _, err := b.eng.Submit(ctx, engine.SubmitParams{Type: "gpu", Agent: "tester", Payload: []byte(`{}`),
			Priority: &nine, Actor: "agent:tester"})
		require.NoError(t, err)
		res := b.claimOn(t, "w1", node, low.ID, high.ID)
		require.Len(t, res.Claimed, 1)
		require.Equal(t, high.ID, res.Claimed[0].ID)
		require.Equal(t, low.ID, res.Refused[0].JobID)
	})

	t.Run("CPUJobsGetCPULeases", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		res := b.claimOn(t, "w1", "cpu-node", job.ID)
		require.Len(t, res.Claimed, 1)
		l := b.lease(t, res.Claimed[0].LeaseToken)
		require.Equal(t, store.LeaseCPU, l.Mode)
		require.Nil(t, l.GPUIndex)
		require.Equal(t, "tester", l.Agent, "held for the job's agent")
		require.Equal(t, job.ID, l.JobID)
		require.Equal(t, b.cfg.Leases.TTL, l.TTL)
		require.True(t, l.ExpiresAt.Equal(b.clock.Now().Add(b.cfg.Leases.TTL)))
	})

	t.Run("DenialsSayWhy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.gpuType(1000, 3)
		job := b.submit(t, "gpu")
		res := b.claimOn(t, "w1", uid("unknown"), job.ID)
		require.Equal(t, []engine.Refusal{{JobID: job.ID, Reason: engine.RefusedRetryLater, Detail: "node_unknown"}}, res.Refused)
		require.Contains(t, b.job(t, job.ID).WaitingReason, "node_unknown: ")

		node := uid("node")
		b.report(t, node, 24576)
		b.clock.Add(b.cfg.Leases.TelemetryFreshness)
		res = b.claimOn(t, "w1", node, job.ID)
		require.Equal(t, []engine.Refusal{{JobID: job.ID, Reason: engine.RefusedRetryLater, Detail: "telemetry_stale"}}, res.Refused)
		require.Contains(t, b.job(t, job.ID).WaitingReason, "telemetry_stale: the telemetry of node", "a new denial replaces the old")

		b.report(t, node, 24576)
		require.Len(t, b.claimOn(t, "w1", node, job.ID).Claimed, 1, "fresh telemetry again")
	})
}

func TestLeasePurger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ExpiredLeaseRetriesItsJobAndRefusesTheZombie", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		purger := leases.NewLeasePurger(b.eng, leases.LeasePurgerConfig{})
		job := b.submit(t, "noop") // max_attempts 2
		claimed := b.claim(t, "w1", job.ID)
		tok := claimed.Claimed[0].LeaseToken
		_, err := b.eng.Start(ctx, engine.StartParams{WorkerID: "w1", JobIDs: []string{job.ID}})
		require.NoError(t, err)

		// Renewed in time: nothing to purge.
		b.clock.Add(b.cfg.Leases.TTL - time.Second)
		renewed, err := b.leases.Renew(ctx, leasesRenew("w1", tok))
		require.NoError(t, err)
		require.Len(t, renewed.Renewed, 1)
		b.clock.Add(2 * time.Second)
		res, err := purger.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Expired)

		// Quiet past the TTL: the lease expires and the job goes back to pending with backoff.
		b.clock.Add(b.cfg.Leases.TTL)
		res, err = purger.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, leases.PurgeResult{Expired: 1, Retried: 1}, res)
		got := b.job(t, job.ID)
		require.Equal(t, store.JobPending, got.Status)
		require.Equal(t, engine.ReasonWorkerLost, got.LastError)
		require.Empty(t, got.WorkerID)
		require.False(t, got.Enqueued)
		require.True(t, got.AvailableAt.After(b.clock.Now()))
		require.Equal(t, store.LeaseExpired, b.lease(t, tok).Status)
		require.Equal(t, []string{engine.EventSubmitted, "job.pending->claimed", "job.claimed->running",
			"lease.expired", "job.running->failed", "job.failed->pending"}, b.auditTypes(t, job.ID))

		// The zombie's late result is refused and changes nothing.
		late, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: tok, Done: true},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeLeaseExpired, late.Outcomes[0].Outcome)
		require.Equal(t, store.JobPending, b.job(t, job.ID).Status)
		// Nor can the lease be renewed again.
		again, err := b.leases.Renew(ctx, leasesRenew("w1", tok))
		require.NoError(t, err)
		require.Empty(t, again.Renewed)
		require.Equal(t, store.LeaseExpired, again.Gone[0].Status)

		// The rescuer's attempt runs under a new lease; when it too goes quiet, attempts are
		// exhausted and the job is dead-lettered.
		b.clock.Add(time.Minute)
		second := b.claim(t, "w2", job.ID)
		require.Len(t, second.Claimed, 1)
		b.clock.Add(b.cfg.Leases.TTL)
		res, err = purger.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, leases.PurgeResult{Expired: 1, DeadLettered: 1}, res)
		got = b.job(t, job.ID)
		require.Equal(t, store.JobDeadLetter, got.Status)
		require.False(t, got.Enqueued, "the dead letter awaits the DLQ relay")
	})

	t.Run("PastExpiryIsRefusedBeforeThePurge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		tok := b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		b.clock.Add(b.cfg.Leases.TTL)
		late, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: tok, Done: true},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeLeaseExpired, late.Outcomes[0].Outcome)
		require.Equal(t, store.JobClaimed, b.job(t, job.ID).Status, "the purger rescues it")
	})

	t.Run("AgentLeaseExpires", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		purger := leases.NewLeasePurger(b.eng, leases.LeasePurgerConfig{})
		l, err := b.leases.Grant(ctx, leasesCPU("agent-a", 10*time.Second))
		require.NoError(t, err)
		b.clock.Add(10 * time.Second)
		res, err := purger.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Expired)
		require.Equal(t, store.LeaseExpired, b.lease(t, l.Token).Status)
	})

	t.Run("FencedPurgeChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fenced := errors.New("not the leader")
		purger := leases.NewLeasePurger(b.eng, leases.LeasePurgerConfig{
			Fence: func(context.Context, store.Tx) error {
				return fmt.Errorf("check term: %w", errors.Join(fenced, store.ErrFenced))
			},
		})
		job := b.submit(t, "noop")
		tok := b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		b.clock.Add(b.cfg.Leases.TTL)
		_, err := purger.RunOnce(ctx)
		require.ErrorIs(t, err, store.ErrFenced)
		require.Equal(t, store.LeaseActive, b.lease(t, tok).Status)
		require.Equal(t, store.JobClaimed, b.job(t, job.ID).Status)
	})
}

func TestRescue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RunningJobIsRetried", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		tok := b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		outcome, err := b.eng.Rescue(ctx, job.ID, "entry idle and lease expired")
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeRetry, outcome)
		got := b.job(t, job.ID)
		require.Equal(t, store.JobPending, got.Status)
		require.Equal(t, "entry idle and lease expired", got.LastError)
		require.Equal(t, store.LeaseExpired, b.lease(t, tok).Status)

		outcome, err = b.eng.Rescue(ctx, job.ID, "again")
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeStale, outcome, "a pending job is left alone")
		outcome, err = b.eng.Rescue(ctx, "missing-"+job.ID, "x")
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeStale, outcome)
	})

	t.Run("Fenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		eng := engine.New(b.store, b.streams, b.cfg, engine.Options{Now: b.clock.Now,
			Fence: func(context.Context, store.Tx) error { return store.ErrFenced }})
		job := b.submit(t, "noop")
		b.claim(t, "w1", job.ID)
		_, err := eng.Rescue(ctx, job.ID, "x")
		require.ErrorIs(t, err, store.ErrFenced)
		require.Equal(t, store.JobClaimed, b.job(t, job.ID).Status)
	})
}

func TestCancelReleasesLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.gpuType(20000, 3)
	node := uid("node")
	b.report(t, node, 24576)
	first, second := b.submit(t, "gpu"), b.submit(t, "gpu")
	tok := b.claimOn(t, "w1", node, first.ID).Claimed[0].LeaseToken
	require.Equal(t, "no_capacity", b.claimOn(t, "w1", node, second.ID).Refused[0].Detail)
	_, err := b.eng.Cancel(context.Background(), first.ID, "admin:test")
	require.NoError(t, err)
	require.Equal(t, store.LeaseReleased, b.lease(t, tok).Status)
	require.Len(t, b.claimOn(t, "w1", node, second.ID).Claimed, 1, "the GPU is free at once")

	// The cancelled attempt's late result is stale.
	res, err := b.eng.Complete(context.Background(), engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
		{JobID: first.ID, Attempt: 1, LeaseToken: tok, Done: true},
	}})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeStale, res.Outcomes[0].Outcome)
}

func leasesRenew(worker string, tokens ...string) leases.RenewParams {
	return leases.RenewParams{WorkerID: worker, Tokens: tokens}
}

func leasesCPU(agent string, ttl time.Duration) leases.GrantParams {
	return leases.GrantParams{Agent: agent, Mode: store.LeaseCPU, TTL: ttl, Actor: "agent:" + agent}
}
