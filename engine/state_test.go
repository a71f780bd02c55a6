package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// TestCanTransition checks every from/to pair against the diagram of DESIGN.md.
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

// recorder is an Executor that records JobUpdate calls and fails the rest.
type recorder struct {
	store.Executor
	updates []store.JobUpdate
	err     error
}

func (r *recorder) JobUpdate(_ context.Context, u store.JobUpdate) error {
	r.updates = append(r.updates, u)
	return r.err
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
