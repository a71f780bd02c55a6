package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/retention"
	"github.com/gpuorch/orchestrator/store"
)

const day = 24 * time.Hour

// finish submits a job of typ and runs it to done.
func (b *bundle) finish(t *testing.T, typ string) store.Job {
	t.Helper()
	job := b.submit(t, typ)
	c, err := b.eng.Claim(context.Background(), engine.ClaimParams{WorkerID: "w1", Items: []engine.ClaimItem{{JobID: job.ID, Stream: typ}}})
	require.NoError(t, err)
	require.Len(t, c.Claimed, 1)
	res, err := b.eng.Complete(context.Background(), engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
		{JobID: job.ID, Attempt: 1, LeaseToken: c.Leases[job.ID].Token, Done: true},
	}})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeDone, res.Outcomes[0].Outcome)
	return job
}

func (b *bundle) exists(t *testing.T, id string) bool {
	t.Helper()
	_, err := b.store.JobGet(context.Background(), id)
	if err != nil {
		require.ErrorIs(t, err, store.ErrNotFound)
		return false
	}
	return true
}

func (b *bundle) retention(t *testing.T, batch int) retention.Result {
	t.Helper()
	res, err := retention.NewCleaner(b.store, b.cfg, retention.Config{Batch: batch, Clock: b.clock.Now}).RunOnce(context.Background())
	require.NoError(t, err)
	return res
}

func (b *bundle) auditCount(t *testing.T) int {
	t.Helper()
	evs, err := b.store.AuditList(context.Background(), store.AuditListParams{Limit: 1000})
	require.NoError(t, err)
	return len(evs)
}

// leaseCount counts the leases, whatever their status.
func (b *bundle) leaseCount(t *testing.T) int {
	t.Helper()
	ls, err := b.store.LeaseList(context.Background(), store.LeaseListParams{Limit: 1000})
	require.NoError(t, err)
	return len(ls)
}

func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DeletesExpiredRowsInBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var done []string
		for range 5 {
			done = append(done, b.finish(t, "noop").ID)
		}
		cancelled, err := b.eng.Cancel(ctx, b.submit(t, "noop").ID, "agent:tester")
		require.NoError(t, err)
		purged, kept := b.deadLetter(t), b.deadLetter(t)
		_, err = b.eng.Purge(ctx, purged.ID, "admin:ops")
		require.NoError(t, err)
		live := b.submit(t, "noop")

		require.Equal(t, retention.Result{}, b.retention(t, 2), "nothing is old enough")

		b.clock.Add(config.RetentionDefault + time.Minute)
		res := b.retention(t, 2)
		require.Equal(t, 5+1+1, res.Jobs, "done, cancelled and purged jobs past the type's retention, two per batch")
		require.Zero(t, res.Audit)
		for _, id := range append(done, cancelled.ID, purged.ID) {
			require.False(t, b.exists(t, id), id)
		}
		require.True(t, b.exists(t, kept.ID), "a dead letter is kept for dead_letter_retention")
		require.True(t, b.exists(t, live.ID))
		auditBefore := b.auditCount(t)
		require.Positive(t, auditBefore)

		b.clock.Add(config.DeadLetterRetentionDefault)
		res = b.retention(t, 2)
		require.Equal(t, 1, res.Jobs)
		require.False(t, b.exists(t, kept.ID))
		require.Equal(t, auditBefore, res.Audit, "every audit row is past audit_retention now")
		require.Zero(t, b.auditCount(t))
		require.Zero(t, res.Leases, "jobs without a GPU hold their leases in their rows: no lease row is left behind")
		require.Zero(t, b.leaseCount(t), "no lease is left: none was active")
		require.True(t, b.exists(t, live.ID), "a live job is never deleted")
	})

	t.Run("TypesNoLongerConfigured", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.cfg.JobTypes["old"] = &config.JobType{Name: "old", Stream: "old", Handler: "noop", MaxAttempts: 1,
			Timeout: time.Minute, Retention: day, Backoff: config.Backoff{Initial: time.Second, Multiplier: 2, Max: time.Minute}}
		old := b.finish(t, "old")
		delete(b.cfg.JobTypes, "old")

		b.clock.Add(2 * day)
		b.retention(t, 10)
		require.True(t, b.exists(t, old.ID), "its own retention is unknown now: the longest one applies")
		b.clock.Add(config.RetentionDefault)
		require.Equal(t, 1, b.retention(t, 10).Jobs)
		require.False(t, b.exists(t, old.ID))
	})

	t.Run("TablesStayBoundedUnderConstantLoad", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.cfg.JobTypes["noop"].Retention = 3 * day
		b.cfg.AuditRetention = 4 * day
		const perDay = 4
		var (
			counts []int
			perJob int // audit rows of one job, measured on the first day
		)
		for i := range 10 {
			for range perDay {
				b.finish(t, "noop")
			}
			if i == 0 {
				perJob = b.auditCount(t) / perDay
				require.Positive(t, perJob)
			}
			b.clock.Add(day)
			b.retention(t, 3)
			jobs, err := b.store.JobList(ctx, store.JobListParams{Agent: "tester", Limit: 1000})
			require.NoError(t, err)
			counts = append(counts, len(jobs))
			require.LessOrEqual(t, len(jobs), 3*perDay, "at most the jobs of the retention window")
			require.LessOrEqual(t, b.auditCount(t), 4*perDay*perJob, "at most the audit rows of the audit window")
			require.LessOrEqual(t, b.leaseCount(t), 4*perDay, "at most the leases of the audit window")
		}
		last := counts[len(counts)-4:]
		require.Equal(t, []int{3 * perDay, 3 * perDay, 3 * perDay, 3 * perDay}, last, "a steady state: %v", counts)
	})
}
