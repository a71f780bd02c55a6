package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// flushPrefix deletes every key of the test's prefix: what FLUSHALL does to this orchestrator.
func (b *bundle) flushPrefix(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	rdb := b.streams.Redis()
	keys, err := rdb.Keys(ctx, b.streams.Prefix()+"*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, rdb.Del(ctx, keys...).Err())
}

// recover runs RecoverRedis and returns its result.
func (b *bundle) recover(t *testing.T) engine.RecoveryResult {
	t.Helper()
	res, err := b.eng.RecoverRedis(context.Background(), nil)
	require.NoError(t, err)
	return res
}

// streamJobs returns the job ids of every entry of a stream, sorted.
func (b *bundle) streamJobs(t *testing.T, stream string) []string {
	t.Helper()
	msgs, err := b.streams.Redis().XRange(context.Background(), b.streams.StreamKey(stream), "-", "+").Result()
	require.NoError(t, err)
	var out []string
	for _, m := range msgs {
		out = append(out, m.Values["job_id"].(string))
	}
	slices.Sort(out)
	return out
}

func TestRecoverRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("FirstRunSetsMarker", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, engine.RecoveryMarkerMissing, b.recover(t).Reason)
		require.Empty(t, b.recover(t).Reason, "nothing to do once the marker is set")
		runID, err := b.streams.RunID(ctx)
		require.NoError(t, err)
		marker, ok, err := b.streams.Marker(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, runID, marker)
	})

	t.Run("EmbeddedStartIsNotAWarning", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var logs bytes.Buffer // RecoverRedis logs before it returns
		log := slog.New(slog.NewTextHandler(&logs, nil))
		eng := engine.New(b.store, b.streams, b.cfg, engine.Options{Logger: log, RedisStartsEmpty: true})
		_, err := eng.RecoverRedis(ctx, nil)
		require.NoError(t, err)
		require.Contains(t, logs.String(), `level=INFO msg="redis starts empty; creating groups and publishing every live job"`)
		require.NotContains(t, logs.String(), "level=WARN")

		// A group lost while the process runs is a loss, even there.
		require.NoError(t, b.streams.Redis().XGroupDestroy(ctx, b.streams.StreamKey("noop"), streams.GroupName("noop")).Err())
		rec, err := eng.RecoverRedis(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, engine.RecoveryGroupMissing, rec.Reason)
		require.Contains(t, logs.String(), `level=WARN msg="redis lost data; recreating groups and publishing every live job again"`)

		// Elsewhere a missing marker may be a loss: a warning.
		logs.Reset()
		b.flushPrefix(t)
		_, err = engine.New(b.store, b.streams, b.cfg, engine.Options{Logger: log}).RecoverRedis(ctx, nil)
		require.NoError(t, err)
		require.Contains(t, logs.String(), `level=WARN msg="redis lost data; recreating groups and publishing every live job again" component=engine reason=marker_missing`)
	})

	t.Run("AfterDataLoss", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		due := b.submit(t, "noop")
		retry := b.submit(t, "noop")
		c := b.claim(t, "w1", retry.ID)
		res, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: retry.ID, Attempt: 1, LeaseToken: c.Leases[retry.ID].Token, Error: "flaky"},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeRetry, res.Outcomes[0].Outcome)
		claimed := b.submit(t, "noop")
		require.Len(t, b.claim(t, "w1", claimed.ID).Claimed, 1)
		running := b.submit(t, "noop")
		require.Len(t, b.claim(t, "w1", running.ID).Claimed, 1)
		_, err = b.eng.Start(ctx, engine.StartParams{WorkerID: "w1", JobIDs: []string{running.ID}})
		require.NoError(t, err)
		dlPublished, dlPurged := b.deadLetter(t), b.deadLetter(t)
		b.relay(t)
		_, err = b.eng.Purge(ctx, dlPurged.ID, "admin:ops")
		require.NoError(t, err)
		dlUnpublished := b.deadLetter(t)
		b.recover(t) // the first run

		b.flushPrefix(t)
		rec := b.recover(t)
		require.Equal(t, engine.RecoveryMarkerMissing, rec.Reason)
		require.Equal(t, 3, rec.Republished, "the due pending job and the claimed and running ones")
		require.Equal(t, 2, rec.Requeued, "the retry waiting for its backoff and the published dead letter")

		ok, err := b.streams.GroupExists(ctx, "noop", streams.GroupName("noop"))
		require.NoError(t, err)
		require.True(t, ok, "the group is created again")
		want := []string{due.ID, claimed.ID, running.ID}
		slices.Sort(want)
		require.Equal(t, want, b.streamJobs(t, "noop"))
		ds, err := b.streams.Read(ctx, streams.ReadParams{Group: streams.GroupName("noop"), Consumer: "w9", Streams: []string{"noop"}, Count: 10, Block: 10 * time.Millisecond})
		require.NoError(t, err)
		require.Len(t, ds, 3, "workers get the new entries")

		require.False(t, b.reload(t, retry.ID).Enqueued, "the dispatcher publishes it when due")
		require.False(t, b.reload(t, dlPublished.ID).Enqueued, "the DLQ relay publishes it again")
		require.True(t, b.reload(t, dlPurged.ID).DeadLetterPurged())
		require.Equal(t, 2, b.relay(t))
		var dlq []string
		for _, e := range b.dlqEntries(t) {
			dlq = append(dlq, e.JobID)
		}
		require.ElementsMatch(t, []string{dlPublished.ID, dlUnpublished.ID}, dlq)

		require.Empty(t, b.recover(t).Reason)
	})

	t.Run("KeepsDeadLettersWhoseEntriesSurvived", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dl := b.deadLetter(t)
		b.relay(t)
		require.NoError(t, b.streams.SetMarker(ctx, "another-server"))
		rec := b.recover(t)
		require.Equal(t, engine.RecoveryRunIDChanged, rec.Reason)
		require.Zero(t, rec.Requeued)
		require.True(t, b.reload(t, dl.ID).Enqueued, "its DLQ entry still exists: no duplicate")
		require.Len(t, b.dlqEntries(t), 1)
	})

	t.Run("GroupMissing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.recover(t)
		job := b.submit(t, "noop")
		require.NoError(t, b.streams.Redis().XGroupDestroy(ctx, b.streams.StreamKey("noop"), streams.GroupName("noop")).Err())
		rec := b.recover(t)
		require.Equal(t, engine.RecoveryGroupMissing, rec.Reason)
		require.Zero(t, rec.Republished)
		require.Equal(t, 1, rec.Present)
		require.Equal(t, []string{job.ID}, b.streamJobs(t, "noop"), "its entry survived: no duplicate")
		ds, err := b.streams.Read(ctx, streams.ReadParams{Group: streams.GroupName("noop"), Consumer: "w9", Streams: []string{"noop"}, Count: 10, Block: 10 * time.Millisecond})
		require.NoError(t, err)
		require.Len(t, ds, 1, "the group, made again from the stream's start, delivers it")
		require.Equal(t, job.ID, ds[0].JobID)
	})

	t.Run("FirstRunAfterSubmits", func(t *testing.T) {
		// The marker is missing on a first start too; jobs submitted before the first pass
		// were published by their submits and are not published again.
		t.Parallel()
		b := setup(t)
		pending := b.submit(t, "noop")
		claimed := b.submit(t, "noop")
		require.Len(t, b.claim(t, "w1", claimed.ID).Claimed, 1)
		rec := b.recover(t)
		require.Equal(t, engine.RecoveryMarkerMissing, rec.Reason)
		require.Zero(t, rec.Republished)
		require.Equal(t, 2, rec.Present)
		want := []string{pending.ID, claimed.ID}
		slices.Sort(want)
		require.Equal(t, want, b.streamJobs(t, "noop"))
	})

	t.Run("FirstRunWhileMarksAreOnTheirWay", func(t *testing.T) {
		// Two jobs just submitted, whose enqueued marks have not landed yet (outbox.MarkDelay). The
		// first's entry is in the stream: it is not published again. The second's went with
		// the lost data: it is, or its mark, landing later, would hide it from the dispatcher.
		t.Parallel()
		b := setup(t)
		published, lost := b.submit(t, "noop"), b.submit(t, "noop")
		lostEntry := b.reload(t, lost.ID).StreamID
		require.NoError(t, b.store.WithTx(ctx, func(tx store.Tx) error {
			_, err := tx.JobClearEnqueued(ctx, store.JobPending, []string{published.ID, lost.ID}, b.clock.Now())
			return err
		}))
		require.NoError(t, b.streams.Redis().XDel(ctx, b.streams.StreamKey("noop"), lostEntry).Err())

		rec := b.recover(t)
		require.Equal(t, engine.RecoveryMarkerMissing, rec.Reason)
		require.Equal(t, 1, rec.Present, "the job its submit published")
		require.Equal(t, 1, rec.Republished, "the job whose entry is gone")
		want := []string{published.ID, lost.ID}
		slices.Sort(want)
		require.Equal(t, want, b.streamJobs(t, "noop"), "one entry each")

		// Past PublishGrace a job still unmarked is the dispatcher's, and a recovery publishes
		// it whatever the stream holds. The one republished above has its mark and entry.
		b.clock.Add(outbox.PublishGrace + time.Second)
		require.NoError(t, b.streams.SetMarker(ctx, "recovering:0123456789abcdef"))
		rec = b.recover(t)
		require.Equal(t, 1, rec.Republished)
		require.Equal(t, 1, rec.Present)
		want = append(want, published.ID)
		slices.Sort(want)
		require.Equal(t, want, b.streamJobs(t, "noop"))
	})

	t.Run("ClaimedBeforeItsMarkLanded", func(t *testing.T) {
		// A job claimed within outbox.MarkDelay of its submit, as most are under load: its mark then
		// matches nothing, and the claim records the entry the worker read. A recovery finds
		// that entry and leaves the job alone.
		t.Parallel()
		b := setup(t)
		b.recover(t) // the first run: the group and the marker
		job, _, err := b.store.JobInsert(ctx, store.JobInsertParams{ID: uid("job"), Type: "noop", Agent: "tester",
			MaxAttempts: 2, Now: b.clock.Now()})
		require.NoError(t, err)
		_, err = b.streams.Publish(ctx, []streams.Message{{Stream: "noop", JobID: job.ID, Type: "noop"}})
		require.NoError(t, err)
		ds, err := b.streams.Read(ctx, streams.ReadParams{Group: streams.GroupName("noop"), Consumer: "w1",
			Streams: []string{"noop"}, Count: 10, Block: 10 * time.Millisecond})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		c, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", Items: []engine.ClaimItem{
			{JobID: job.ID, Stream: "noop", MessageID: ds[0].ID}}})
		require.NoError(t, err)
		require.Len(t, c.Claimed, 1)
		require.Equal(t, ds[0].ID, b.reload(t, job.ID).StreamID, "the claim records the entry")

		require.NoError(t, b.streams.SetMarker(ctx, "recovering:0123456789abcdef")) // a recovery is due
		rec := b.recover(t)
		require.Equal(t, 1, rec.Present)
		require.Zero(t, rec.Republished)
		require.Equal(t, []string{job.ID}, b.streamJobs(t, "noop"), "no second entry")

		// A message id that is no entry id is not recorded: the recovery could not look it up.
		other, _, err := b.store.JobInsert(ctx, store.JobInsertParams{ID: uid("job"), Type: "noop", Agent: "tester",
			MaxAttempts: 2, Now: b.clock.Now()})
		require.NoError(t, err)
		_, err = b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", Items: []engine.ClaimItem{
			{JobID: other.ID, Stream: "noop", MessageID: "not-an-entry"}}})
		require.NoError(t, err)
		require.Empty(t, b.reload(t, other.ID).StreamID)
	})

	t.Run("InterruptedRecoveryIsRedone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.recover(t)
		job := b.submit(t, "noop")
		// A recovery that died half-way leaves its token in the marker.
		require.NoError(t, b.streams.SetMarker(ctx, "recovering:0123456789abcdef"))
		require.NoError(t, b.streams.Redis().XDel(ctx, b.streams.StreamKey("noop"), b.reload(t, job.ID).StreamID).Err())
		rec := b.recover(t)
		require.Equal(t, engine.RecoveryRunIDChanged, rec.Reason)
		require.Equal(t, 1, rec.Republished, "its entry was lost")
		require.Equal(t, []string{job.ID}, b.streamJobs(t, "noop"))
		require.Equal(t, store.JobPending, b.reload(t, job.ID).Status)
		require.Empty(t, b.recover(t).Reason)
	})
}

// TestRecentEntries: a recovery reads a stream's recent entries once per page of jobs, and only
// those added since its last read.
func TestRecentEntries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	publish := func(ids ...string) []string {
		msgs := make([]streams.Message, len(ids))
		for i, id := range ids {
			msgs[i] = streams.Message{Stream: "noop", JobID: id, Type: "noop"}
		}
		entries, err := b.streams.Publish(ctx, msgs)
		require.NoError(t, err)
		return entries
	}
	ms, _, _ := strings.Cut(publish("old")[0], "-")
	oldMS, err := strconv.ParseInt(ms, 10, 64)
	require.NoError(t, err)
	// The index starts a millisecond after the old entry; the next entries come after that.
	start := time.UnixMilli(oldMS + 1)
	require.Eventually(t, func() bool { return time.Now().After(start) }, time.Second, time.Millisecond)
	x := engine.NewRecentEntries(streams.EntryIDAt(start))
	many := make([]string, 1500) // past one XRANGE page
	for i := range many {
		many[i] = fmt.Sprintf("j-%d", i)
	}
	publish(many...)

	require.NoError(t, x.Update(ctx, b.streams, "noop", true))
	require.False(t, x.Has("old"), "an entry before the index's start")
	require.True(t, x.Has("j-0"))
	require.True(t, x.Has("j-1499"))
	require.Equal(t, 1500, x.Read())

	publish("later")
	require.NoError(t, x.Update(ctx, b.streams, "noop", false))
	require.False(t, x.Has("later"), "read once per page of jobs")
	require.NoError(t, x.Update(ctx, b.streams, "noop", true))
	require.True(t, x.Has("later"), "the next page tops it up")
	require.Equal(t, 1501, x.Read(), "with the new entries only")
}
