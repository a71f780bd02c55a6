package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/reclaimer"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// reload reads a job, requiring success.
func (b *bundle) reload(t *testing.T, id string) store.Job {
	t.Helper()
	j, err := b.store.JobGet(context.Background(), id)
	require.NoError(t, err)
	return j
}

// deadLetter submits a noop job, claims it and fails it with a non-retryable error.
func (b *bundle) deadLetter(t *testing.T) store.Job {
	t.Helper()
	job := b.submit(t, "noop")
	claimed := b.claim(t, "w1", job.ID)
	require.Len(t, claimed.Claimed, 1)
	res, err := b.eng.Complete(context.Background(), engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{{
		JobID: job.ID, Attempt: 1, LeaseToken: claimed.Leases[job.ID].Token, Error: "boom", NonRetryable: true,
	}}})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeDeadLetter, res.Outcomes[0].Outcome)
	dl := b.reload(t, job.ID)
	require.Equal(t, store.JobDeadLetter, dl.Status)
	require.False(t, dl.Enqueued, "not on the DLQ stream yet")
	return dl
}

// relay runs one DLQ relay pass.
func (b *bundle) relay(t *testing.T) int {
	t.Helper()
	n, err := reclaimer.NewDLQRelay(b.eng, reclaimer.DLQRelayConfig{Batch: 2}).RunOnce(context.Background())
	require.NoError(t, err)
	return n
}

func (b *bundle) dlqEntries(t *testing.T) []streams.DeadLetter {
	t.Helper()
	dls, err := b.streams.ListDeadLetters(context.Background(), "", 1000)
	require.NoError(t, err)
	return dls
}

// staleStore answers JobListDeadLetterUnpublished with a fixed list: the relay then works on
// rows that changed since, as it would if a replay committed between its query and its mark.
type staleStore struct {
	store.Store
	jobs []store.Job
}

func (s staleStore) JobListDeadLetterUnpublished(context.Context, int) ([]store.Job, error) {
	return s.jobs, nil
}

func TestDLQRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("PublishesAndMarks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobs := []store.Job{b.deadLetter(t), b.deadLetter(t), b.deadLetter(t)}
		require.Equal(t, 3, b.relay(t), "two batches of at most 2")
		require.Zero(t, b.relay(t), "published once")

		entries := b.dlqEntries(t)
		require.Len(t, entries, 3)
		byJob := map[string]streams.DeadLetter{}
		for _, e := range entries {
			byJob[e.JobID] = e
		}
		for _, j := range jobs {
			e, ok := byJob[j.ID]
			require.True(t, ok, j.ID)
			require.Equal(t, streams.DeadLetter{ID: e.ID, JobID: j.ID, OriginStream: "noop", Type: "noop", Attempts: 1, LastError: "boom"}, e)
			got := b.reload(t, j.ID)
			require.True(t, got.Enqueued)
			require.Equal(t, e.ID, got.StreamID)
		}
	})

	t.Run("DeletesEntriesOfReplayedJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dl := b.deadLetter(t)
		_, err := b.eng.Replay(ctx, dl.ID, "admin:test")
		require.NoError(t, err)
		stale := engine.New(staleStore{Store: b.store, jobs: []store.Job{dl}}, b.streams, b.cfg, engine.Options{Now: b.clock.Now})
		n, full, err := stale.RelayDeadLetters(ctx, nil, 10)
		require.NoError(t, err)
		require.Zero(t, n)
		require.False(t, full)
		require.Empty(t, b.dlqEntries(t), "the entry of a job that is no longer a dead letter is removed")
		require.Equal(t, store.JobPending, b.reload(t, dl.ID).Status)
	})
}

func TestReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("BackToPendingWithFreshBudget", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dl := b.deadLetter(t)
		b.relay(t)
		require.Len(t, b.dlqEntries(t), 1)
		before, err := b.streams.Len(ctx, "noop")
		require.NoError(t, err)
		b.clock.Add(time.Second)

		job, err := b.eng.Replay(ctx, dl.ID, "admin:ops")
		require.NoError(t, err)
		require.Equal(t, store.JobPending, job.Status)
		require.Equal(t, 1, job.Attempts, "attempts never go down")
		require.Equal(t, 1+b.cfg.JobTypes["noop"].MaxAttempts, job.MaxAttempts)
		require.Equal(t, "boom", job.LastError, "the last error is kept")
		require.True(t, job.Enqueued, "published at once")
		requireSame(t, job, b.reload(t, dl.ID))
		require.Nil(t, b.reload(t, dl.ID).FinishedAt)
		require.False(t, b.reload(t, dl.ID).AvailableAt.After(b.clock.Now()))

		require.Empty(t, b.dlqEntries(t), "the DLQ entry is deleted")
		after, err := b.streams.Len(ctx, "noop")
		require.NoError(t, err)
		require.Equal(t, before+1, after)

		evs, err := b.store.AuditList(ctx, store.AuditListParams{JobID: dl.ID})
		require.NoError(t, err)
		last := evs[len(evs)-1]
		require.Equal(t, engine.TransitionEvent(store.JobDeadLetter, store.JobPending), last.EventType)
		require.Equal(t, "admin:ops", last.Actor)
		var details map[string]any
		require.NoError(t, json.Unmarshal(last.Details, &details))
		require.EqualValues(t, job.MaxAttempts, details["max_attempts"])

		// The job runs again, as attempt 2.
		claimed := b.claim(t, "w2", dl.ID)
		require.Len(t, claimed.Claimed, 1)
		require.Equal(t, 2, claimed.Claimed[0].Attempts)
	})

	t.Run("UnpublishedDeadLetter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dl := b.deadLetter(t) // the relay has not run
		job, err := b.eng.Replay(ctx, dl.ID, "admin:ops")
		require.NoError(t, err)
		require.Equal(t, store.JobPending, job.Status)
		require.Zero(t, b.relay(t), "nothing left to relay")
		require.Empty(t, b.dlqEntries(t))
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		live := b.submit(t, "noop")
		_, err := b.eng.Replay(ctx, live.ID, "admin:ops")
		require.ErrorIs(t, err, engine.ErrNotDeadLetter)
		_, err = b.eng.Replay(ctx, "no-such-job", "admin:ops")
		require.ErrorIs(t, err, store.ErrNotFound)

		dl := b.deadLetter(t)
		_, err = b.eng.Replay(ctx, dl.ID, "admin:ops")
		require.NoError(t, err)
		_, err = b.eng.Replay(ctx, dl.ID, "admin:ops")
		require.ErrorIs(t, err, engine.ErrNotDeadLetter, "replayed once")
	})
}

func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	dl := b.deadLetter(t)
	kept := b.deadLetter(t)
	b.relay(t)
	require.Len(t, b.dlqEntries(t), 2)

	job, err := b.eng.Purge(ctx, dl.ID, "admin:ops")
	require.NoError(t, err)
	require.Equal(t, store.JobDeadLetter, job.Status)
	require.True(t, job.DeadLetterPurged())
	requireSame(t, job, b.reload(t, dl.ID))

	entries := b.dlqEntries(t)
	require.Len(t, entries, 1)
	require.Equal(t, kept.ID, entries[0].JobID)
	require.Zero(t, b.relay(t), "a purged dead letter is not published again")

	listed, err := b.eng.ListDeadLetters(ctx, store.DeadLetterListParams{})
	require.NoError(t, err)
	require.Equal(t, []string{kept.ID}, jobIDs(listed))

	evs, err := b.store.AuditList(ctx, store.AuditListParams{JobID: dl.ID})
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, engine.EventDLQPurged, last.EventType)
	require.Equal(t, "admin:ops", last.Actor)

	_, err = b.eng.Purge(ctx, dl.ID, "admin:ops")
	require.ErrorIs(t, err, engine.ErrNotDeadLetter, "purged once")
	_, err = b.eng.Replay(ctx, dl.ID, "admin:ops")
	require.ErrorIs(t, err, engine.ErrNotDeadLetter, "a purged dead letter is not replayed")
	_, err = b.eng.Purge(ctx, b.submit(t, "noop").ID, "admin:ops")
	require.ErrorIs(t, err, engine.ErrNotDeadLetter)
	_, err = b.eng.Purge(ctx, "no-such-job", "admin:ops")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// requireSame compares the fields of two jobs that Replay and Purge return and the row holds.
func requireSame(t *testing.T, want, got store.Job) {
	t.Helper()
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.Status, got.Status)
	require.Equal(t, want.Attempts, got.Attempts)
	require.Equal(t, want.MaxAttempts, got.MaxAttempts)
	require.Equal(t, want.Enqueued, got.Enqueued)
	require.Equal(t, want.StreamID, got.StreamID)
	require.Equal(t, want.LastError, got.LastError)
	require.True(t, want.UpdatedAt.Equal(got.UpdatedAt), "updated_at %s vs %s", want.UpdatedAt, got.UpdatedAt)
}

func jobIDs(jobs []store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}
