package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// TestDecide is the settle decision table of the reclaimer.
func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Second), now.Add(time.Minute)
	job := func(st store.JobStatus, attempts int, enqueued bool, avail time.Time) *store.Job {
		return &store.Job{ID: "j", Status: st, Attempts: attempts, Enqueued: enqueued, AvailableAt: avail}
	}
	entry := func(attempt int) streams.Delivery { return streams.Delivery{JobID: "j", Attempt: attempt} }

	tests := []struct {
		name  string
		job   *store.Job
		entry streams.Delivery
		lease engine.LeaseState
		want  engine.SettleOutcome
	}{
		{"MissingJob", nil, entry(0), engine.LeaseUnknown, engine.SettleMissing},
		{"EntryWithoutJobID", job(store.JobPending, 0, true, past), streams.Delivery{Attempt: -1}, engine.LeaseUnknown, engine.SettleMissing},
		{"Done", job(store.JobDone, 1, true, past), entry(0), engine.LeaseLive, engine.SettleTerminal},
		{"DeadLetter", job(store.JobDeadLetter, 3, false, past), entry(2), engine.LeaseExpired, engine.SettleTerminal},
		{"Cancelled", job(store.JobCancelled, 0, true, past), entry(0), engine.LeaseUnknown, engine.SettleTerminal},
		{"PendingEnqueuedDue", job(store.JobPending, 0, true, past), entry(0), engine.LeaseUnknown, engine.SettleRepublished},
		{"PendingEnqueuedDueNow", job(store.JobPending, 0, true, now), entry(0), engine.LeaseUnknown, engine.SettleRepublished},
		{"PendingEnqueuedNotDue", job(store.JobPending, 1, true, future), entry(1), engine.LeaseUnknown, engine.SettleRequeued},
		{"PendingNotEnqueued", job(store.JobPending, 1, false, past), entry(0), engine.LeaseUnknown, engine.SettleRequeued},
		{"PendingRetryWaiting", job(store.JobPending, 1, false, future), entry(0), engine.LeaseUnknown, engine.SettleRequeued},
		{"ClaimedLiveLease", job(store.JobClaimed, 1, true, past), entry(0), engine.LeaseLive, engine.SettleLive},
		{"RunningLiveLease", job(store.JobRunning, 1, true, past), entry(0), engine.LeaseLive, engine.SettleLive},
		{"ClaimedLeaseUnknown", job(store.JobClaimed, 1, true, past), entry(0), engine.LeaseUnknown, engine.SettleLive},
		{"ClaimedLeaseExpired", job(store.JobClaimed, 1, true, past), entry(0), engine.LeaseExpired, engine.SettleRescue},
		{"RunningLeaseExpired", job(store.JobRunning, 2, true, past), entry(1), engine.LeaseExpired, engine.SettleRescue},
		{"RunningEntryWithoutAttempt", job(store.JobRunning, 3, true, past), entry(-1), engine.LeaseExpired, engine.SettleRescue},
		{"RunningEntryOfEarlierAttempt", job(store.JobRunning, 3, true, past), entry(0), engine.LeaseExpired, engine.SettleStale},
		{"ClaimedEntryOfEarlierAttemptLive", job(store.JobClaimed, 2, true, past), entry(0), engine.LeaseLive, engine.SettleStale},
		{"WaitingStrayEntry", job(store.JobWaiting, 0, false, past), entry(0), engine.LeaseUnknown, engine.SettleRequeued},
		{"AwaitingApprovalStrayEntry", job(store.JobAwaitingApproval, 0, false, past), entry(0), engine.LeaseUnknown, engine.SettleRequeued},
		{"FailedIsLeftAlone", job(store.JobFailed, 1, false, past), entry(0), engine.LeaseExpired, engine.SettleLive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := engine.Decide(tc.job, tc.entry, tc.lease, now)
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("Acks", func(t *testing.T) {
		t.Parallel()
		for _, o := range engine.SettleOutcomes {
			want := o != engine.SettleLive && o != engine.SettleRescue
			require.Equal(t, want, o.Acks(), string(o))
		}
	})
}

func TestSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	done := b.submit(t, "noop")
	c := b.claim(t, "w1", done.ID)
	_, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
		{JobID: done.ID, Attempt: 1, LeaseToken: c.Leases[done.ID].Token, Done: true},
	}})
	require.NoError(t, err)

	due := b.submit(t, "noop")
	notDue := b.submit(t, "noop") // enqueued, then pushed into the future
	later := b.clock.Now().Add(time.Hour)
	require.NoError(t, b.store.JobUpdate(ctx, store.JobUpdate{ID: notDue.ID, From: store.JobPending, To: store.JobPending, AvailableAt: &later, Now: b.clock.Now()}))

	retry := b.submit(t, "noop")
	c = b.claim(t, "w1", retry.ID)
	res, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
		{JobID: retry.ID, Attempt: 1, LeaseToken: c.Leases[retry.ID].Token, Error: "flaky"},
	}})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeRetry, res.Outcomes[0].Outcome)

	claimed := b.submit(t, "noop")
	require.Len(t, b.claim(t, "w2", claimed.ID).Claimed, 1)

	entry := func(id string, attempt int) streams.Delivery {
		return streams.Delivery{Stream: "noop", Group: streams.GroupName("noop"), ID: "1-1", JobID: id, Attempt: attempt}
	}
	before, err := b.streams.Len(ctx, "noop")
	require.NoError(t, err)
	ss, err := b.eng.Settle(ctx, engine.SettleParams{Entries: []streams.Delivery{
		entry(done.ID, 0), entry(due.ID, 0), entry(due.ID, 0), entry(notDue.ID, 0), entry(retry.ID, 0),
		entry(claimed.ID, 0), entry("no-such-job", 0), {Stream: "noop", ID: "1-2", Attempt: -1},
	}})
	require.NoError(t, err)
	var got []engine.SettleOutcome
	for _, s := range ss {
		got = append(got, s.Outcome)
	}
	require.Equal(t, []engine.SettleOutcome{
		engine.SettleTerminal, engine.SettleRepublished, engine.SettleRepublished, engine.SettleRequeued,
		engine.SettleRequeued, engine.SettleLive, engine.SettleMissing, engine.SettleMissing,
	}, got)

	after, err := b.streams.Len(ctx, "noop")
	require.NoError(t, err)
	require.Equal(t, before+1, after, "one republication per job")
	require.False(t, b.reload(t, notDue.ID).Enqueued, "handed to the dispatcher")
	require.False(t, b.reload(t, retry.ID).Enqueued)

	// The worker of the claimed job goes quiet past its lease: the entry is to be rescued.
	b.clock.Add(b.cfg.Leases.TTL + time.Second)
	ss, err = b.eng.Settle(ctx, engine.SettleParams{Entries: []streams.Delivery{entry(claimed.ID, 0)}})
	require.NoError(t, err)
	require.Equal(t, engine.SettleRescue, ss[0].Outcome)
	require.Equal(t, store.JobClaimed, ss[0].Status)
}
