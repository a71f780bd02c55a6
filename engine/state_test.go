package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// TestCanTransition checks every from/to pair against the job state diagram of
// docs/architecture.md.
func TestCanTransition(t *testing.T) {
	t.Parallel()
	allowed := map[[2]store.JobStatus]bool{
		{store.JobPending, store.JobClaimed}:    true,
		{store.JobPending, store.JobCancelled}:  true,
		{store.JobClaimed, store.JobRunning}:    true,
		{store.JobClaimed, store.JobFailed}:     true,
		{store.JobClaimed, store.JobCancelled}:  true,
		{store.JobClaimed, store.JobPending}:    true,
		{store.JobRunning, store.JobDone}:       true,
		{store.JobRunning, store.JobFailed}:     true,
		{store.JobRunning, store.JobCancelled}:  true,
		{store.JobFailed, store.JobPending}:     true,
		{store.JobFailed, store.JobDeadLetter}:  true,
		{store.JobDeadLetter, store.JobPending}: true,
		// approvals and flows (docs/architecture.md, "Workflows, fan-out and approvals")
		{store.JobAwaitingApproval, store.JobPending}:   true,
		{store.JobAwaitingApproval, store.JobWaiting}:   true,
		{store.JobAwaitingApproval, store.JobCancelled}: true,
		{store.JobWaiting, store.JobPending}:            true,
		{store.JobWaiting, store.JobCancelled}:          true,
		{store.JobWaiting, store.JobDone}:               true,
		{store.JobWaiting, store.JobFailed}:             true,
	}
	for _, from := range store.JobStatuses {
		for _, to := range store.JobStatuses {
			want := allowed[[2]store.JobStatus{from, to}]
			require.Equal(t, want, CanTransition(from, to), "%s -> %s", from, to)
		}
	}
	// Every state of the table is a known state, and the table names no unknown target.
	for from, tos := range transitions {
		require.True(t, from.Valid(), from)
		for _, to := range tos {
			require.True(t, to.Valid(), to)
		}
	}
	require.Len(t, transitions, len(store.JobStatuses))
}

// recorder is an Executor that records job writes and fails the rest.
type recorder struct {
	store.Executor
	updates []store.JobUpdate
	calls   int
	err     error
}

func (r *recorder) JobUpdate(ctx context.Context, u store.JobUpdate) error {
	return r.JobUpdateMany(ctx, []store.JobUpdate{u})
}

func (r *recorder) JobUpdateMany(_ context.Context, us []store.JobUpdate) error {
	r.calls++
	r.updates = append(r.updates, us...)
	return r.err
}

// TestTransitionAllMergesChains checks that a plan's steps become one write from the job's
// status to the last target, with every field any step sets, and one audit event per step; and
// that several plans are one batch.
func TestTransitionAllMergesChains(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	rec := &recorder{}
	failed := &store.Job{ID: "f", Status: store.JobRunning, LeaseToken: "tf", WorkerID: "w"}
	doneJob := &store.Job{ID: "d", Status: store.JobClaimed, LeaseToken: "td"}
	msg, empty, at := "boom", "", now.Add(time.Second)
	evs, err := transitionAll(context.Background(), rec, []plan{
		{job: failed, actor: "worker:w", steps: []step{
			{update: store.JobUpdate{To: store.JobFailed, LastError: &msg, Now: now}},
			{update: store.JobUpdate{To: store.JobPending, AvailableAt: &at, WorkerID: &empty, LeaseToken: &empty, Now: now},
				details: map[string]any{"next_attempt": 2}},
		}},
		{job: doneJob, actor: "worker:w", steps: []step{
			{update: store.JobUpdate{To: store.JobRunning, StartedAt: &now, Now: now}},
			{update: store.JobUpdate{To: store.JobDone, FinishedAt: &now, LeaseToken: &empty, Now: now}},
		}},
	})
	require.NoError(t, err)
	require.Equal(t, 1, rec.calls, "one batch for all plans")
	require.Len(t, rec.updates, 2)
	u := rec.updates[0]
	require.Equal(t, store.JobRunning, u.From)
	require.Equal(t, store.JobPending, u.To)
	require.Equal(t, &msg, u.LastError, "a field of the first step survives the merge")
	require.Equal(t, &at, u.AvailableAt)
	require.Equal(t, store.JobClaimed, rec.updates[1].From)
	require.Equal(t, store.JobDone, rec.updates[1].To)
	require.NotNil(t, rec.updates[1].StartedAt)

	var types []string
	for _, ev := range evs {
		types = append(types, ev.JobID+" "+ev.EventType)
	}
	require.Equal(t, []string{
		"f job.running->failed", "f job.failed->pending", "d job.claimed->running", "d job.running->done",
	}, types)
	require.Equal(t, "tf", evs[0].LeaseToken, "the failed event still names the attempt's lease")
	require.JSONEq(t, `{"next_attempt":2}`, string(evs[1].Details))
	require.Equal(t, store.JobPending, failed.Status)
	require.Equal(t, store.JobDone, doneJob.Status)

	// A chain the state machine refuses writes nothing.
	rec = &recorder{}
	j := &store.Job{ID: "x", Status: store.JobPending}
	_, err = transitionAll(context.Background(), rec, []plan{{job: j, steps: []step{
		{update: store.JobUpdate{To: store.JobClaimed, Now: now}},
		{update: store.JobUpdate{To: store.JobDone, Now: now}},
	}}})
	require.ErrorIs(t, err, ErrIllegalTransition)
	require.Zero(t, rec.calls)
	require.Equal(t, store.JobPending, j.Status)
}

// TestTransition checks that every pair goes through transition as the table says: allowed
// moves write a compare-and-set from the current status and yield an audit event; refused ones
// write nothing.
func TestTransition(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for _, from := range store.JobStatuses {
		for _, to := range store.JobStatuses {
			t.Run(string(from)+"To"+string(to), func(t *testing.T) {
				t.Parallel()
				rec := &recorder{}
				job := &store.Job{ID: "j1", Status: from, LeaseToken: "tok"}
				ev, err := transition(context.Background(), rec, change{
					job: job, update: store.JobUpdate{To: to, Now: now}, actor: "test",
				})
				if !CanTransition(from, to) {
					require.ErrorIs(t, err, ErrIllegalTransition)
					require.Empty(t, rec.updates)
					require.Equal(t, from, job.Status)
					return
				}
				require.NoError(t, err)
				require.Len(t, rec.updates, 1)
				require.Equal(t, from, rec.updates[0].From)
				require.Equal(t, "j1", rec.updates[0].ID)
				require.Equal(t, to, job.Status)
				require.Equal(t, TransitionEvent(from, to), ev.EventType)
				require.Equal(t, "j1", ev.JobID)
				require.Equal(t, "test", ev.Actor)
				require.Equal(t, now, ev.TS)
			})
		}
	}
}

func TestTransitionConflictLeavesJobAlone(t *testing.T) {
	t.Parallel()
	rec := &recorder{err: store.ErrConflict}
	job := &store.Job{ID: "j1", Status: store.JobPending}
	_, err := transition(context.Background(), rec, change{job: job, update: store.JobUpdate{To: store.JobClaimed}})
	require.True(t, errors.Is(err, store.ErrConflict))
	require.Equal(t, store.JobPending, job.Status)
}
