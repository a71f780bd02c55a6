package streams_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/streams"
)

// setup returns a stream client on the real test Redis under a fresh key prefix.
func setup(t *testing.T) (*streams.Client, redis.UniversalClient) {
	t.Helper()
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	return streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)}), rdb
}

// publish adds n entries for jobs named prefix-i and returns their ids.
func publish(t *testing.T, sc *streams.Client, stream string, n int) []string {
	t.Helper()
	msgs := make([]streams.Message, n)
	for i := range msgs {
		msgs[i] = streams.Message{Stream: stream, JobID: stream + "-" + string(rune('a'+i)), Type: "t", Attempt: 0}
	}
	ids, err := sc.Publish(context.Background(), msgs)
	require.NoError(t, err)
	return ids
}

func read(t *testing.T, sc *streams.Client, stream, group, consumer string, n int) []streams.Delivery {
	t.Helper()
	ds, err := sc.Read(context.Background(), streams.ReadParams{
		Group: group, Consumer: consumer, Streams: []string{stream}, Count: n, Block: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.Len(t, ds, n)
	return ds
}

func TestAutoClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc, rdb := setup(t)
	require.NoError(t, sc.EnsureGroup(ctx, "s", "g"))
	ids := publish(t, sc, "s", 5)
	read(t, sc, "s", "g", "dead-worker", 5)

	// One entry is gone from the stream while still pending: Redis 7 reports it as deleted.
	n, err := rdb.XDel(ctx, sc.StreamKey("s"), ids[1]).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	var (
		claimed []streams.Delivery
		deleted []string
		start   = ""
	)
	for {
		res, err := sc.AutoClaim(ctx, streams.AutoClaimParams{
			Stream: "s", Group: "g", Consumer: "reclaimer", MinIdle: 0, Start: start, Count: 2,
		})
		require.NoError(t, err)
		require.LessOrEqual(t, len(res.Claimed)+len(res.Deleted), 2)
		claimed = append(claimed, res.Claimed...)
		deleted = append(deleted, res.Deleted...)
		if res.Next == "0-0" {
			break
		}
		start = res.Next
	}
	require.Equal(t, []string{ids[1]}, deleted)
	require.Len(t, claimed, 4)
	for _, d := range claimed {
		require.Equal(t, "s", d.Stream)
		require.Equal(t, "g", d.Group)
		require.True(t, strings.HasPrefix(d.JobID, "s-"))
		require.Equal(t, 0, d.Attempt)
	}

	// Claimed entries are idle for 0 ms now: a min-idle of an hour claims nothing.
	res, err := sc.AutoClaim(ctx, streams.AutoClaimParams{Stream: "s", Group: "g", Consumer: "reclaimer", MinIdle: time.Hour, Count: 10})
	require.NoError(t, err)
	require.Empty(t, res.Claimed)

	require.NoError(t, sc.AckIDs(ctx, "s", "g", ids...))
	pending, err := sc.PendingCount(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, pending)

	_, err = sc.AutoClaim(ctx, streams.AutoClaimParams{Stream: "missing", Group: "g", Consumer: "r", Count: 10})
	require.ErrorIs(t, err, streams.ErrNoGroup)
}

func TestGroupsAndMarker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc, _ := setup(t)

	ok, err := sc.GroupExists(ctx, "s", "g")
	require.NoError(t, err)
	require.False(t, ok, "no stream")
	require.NoError(t, sc.EnsureGroup(ctx, "s", "other"))
	ok, err = sc.GroupExists(ctx, "s", "g")
	require.NoError(t, err)
	require.False(t, ok, "another group only")
	require.NoError(t, sc.EnsureGroup(ctx, "s", "g"))
	ok, err = sc.GroupExists(ctx, "s", "g")
	require.NoError(t, err)
	require.True(t, ok)

	runID, err := sc.RunID(ctx)
	require.NoError(t, err)
	require.Len(t, runID, 40)

	_, found, err := sc.Marker(ctx)
	require.NoError(t, err)
	require.False(t, found)
	require.NoError(t, sc.SetMarker(ctx, runID))
	got, found, err := sc.Marker(ctx)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, runID, got)

	ok, err = sc.SwapMarker(ctx, "recovering:x", "new")
	require.NoError(t, err)
	require.False(t, ok, "the marker does not hold the expected value")
	require.NoError(t, sc.SetMarker(ctx, "recovering:x"))
	ok, err = sc.SwapMarker(ctx, "recovering:x", runID)
	require.NoError(t, err)
	require.True(t, ok)
	got, _, err = sc.Marker(ctx)
	require.NoError(t, err)
	require.Equal(t, runID, got)
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc, _ := setup(t)

	long := strings.Repeat("é", streams.DeadLetterErrorMax) // 2 bytes a rune: cut in the middle
	ids, err := sc.AddDeadLetters(ctx, []streams.DeadLetter{
		{JobID: "j1", OriginStream: "noop", Type: "noop", Attempts: 3, LastError: "boom"},
		{JobID: "j2", OriginStream: "inference_jobs", Type: "inference", Attempts: 1, LastError: long},
		{JobID: "j3", OriginStream: "noop", Type: "noop", Attempts: 2},
	})
	require.NoError(t, err)
	require.Len(t, ids, 3)

	all, err := sc.ListDeadLetters(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, streams.DeadLetter{ID: ids[0], JobID: "j1", OriginStream: "noop", Type: "noop", Attempts: 3, LastError: "boom"}, all[0])
	require.LessOrEqual(t, len(all[1].LastError), streams.DeadLetterErrorMax)
	require.True(t, strings.HasPrefix(long, all[1].LastError))
	require.Equal(t, "inference_jobs", all[1].OriginStream)

	page, err := sc.ListDeadLetters(ctx, ids[0], 1)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "j2", page[0].JobID)

	n, err := sc.DeleteDeadLetters(ctx, ids[1], "1-1")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	left, err := sc.Len(ctx, streams.DLQStream)
	require.NoError(t, err)
	require.EqualValues(t, 2, left)

	exists, err := sc.DeadLettersExist(ctx, []string{ids[0], ids[1], ids[2]})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{ids[0]: true, ids[1]: false, ids[2]: true}, exists)
}

func TestJobEntries(t *testing.T) {
	t.Parallel()
	sc, _ := setup(t)
	ctx := context.Background()
	start := streams.EntryIDAt(time.Now().Add(-time.Minute))
	// Two and a half pages, most sharing a millisecond: the pages go on by sequence number.
	msgs := make([]streams.Message, 2500)
	for i := range msgs {
		msgs[i] = streams.Message{Stream: "jobs", JobID: fmt.Sprintf("j-%d", i), Type: "t"}
	}
	_, err := sc.Publish(ctx, msgs)
	require.NoError(t, err)

	var seen []string
	next := start
	for range 3 {
		ids, n, err := sc.JobEntries(ctx, "jobs", next, 1000)
		require.NoError(t, err)
		seen, next = append(seen, ids...), n
	}
	require.Len(t, seen, 2500)
	for i, id := range seen {
		require.Equal(t, fmt.Sprintf("j-%d", i), id, "every entry once, in order")
	}
	ids, n, err := sc.JobEntries(ctx, "jobs", next, 1000)
	require.NoError(t, err)
	require.Empty(t, ids, "nothing after the last entry")
	require.Equal(t, next, n, "the next read starts where this one did")

	_, err = sc.Publish(ctx, []streams.Message{{Stream: "jobs", JobID: "late", Type: "t"}})
	require.NoError(t, err)
	ids, _, err = sc.JobEntries(ctx, "jobs", next, 1000)
	require.NoError(t, err)
	require.Equal(t, []string{"late"}, ids, "a later read gets what was added since")

	ids, _, err = sc.JobEntries(ctx, "jobs", streams.EntryIDAt(time.Now().Add(time.Hour)), 1000)
	require.NoError(t, err)
	require.Empty(t, ids, "no entry is that recent")
	ids, _, err = sc.JobEntries(ctx, "none", start, 1000)
	require.NoError(t, err)
	require.Empty(t, ids, "no such stream")
}

func TestIsEntryID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"1700000000000-0": true, "0-1": true, "18446744073709551615-18446744073709551615": true,
		"": false, "1700000000000": false, "-": false, "1-": false, "-1": false, "a-1": false,
		"1-2-3": false, "+1-2": false, "18446744073709551616-0": false, "*": false,
	} {
		require.Equal(t, want, streams.IsEntryID(id), id)
	}
}
