package embedredis_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/embedredis"
	"github.com/gpuorch/orchestrator/streams"
)

// setup starts a server on a free loopback port and returns a streams client on it.
func setup(t *testing.T) (*embedredis.Server, *streams.Client) {
	t.Helper()
	srv, err := embedredis.Start("127.0.0.1:0")
	require.NoError(t, err)
	rdb := streams.NewRedis(srv.Addr(), "")
	t.Cleanup(func() {
		_ = rdb.Close()
		srv.Close()
	})
	return srv, streams.New(rdb, streams.Options{Prefix: "t:"})
}

func TestStart(t *testing.T) {
	t.Parallel()

	t.Run("RefusesNonLoopback", func(t *testing.T) {
		t.Parallel()
		_, err := embedredis.Start("0.0.0.0:0")
		require.ErrorContains(t, err, "not a loopback address")
		_, err = embedredis.Start("nonsense")
		require.Error(t, err)
	})

	t.Run("PortInUse", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		_, err = embedredis.Start(ln.Addr().String())
		require.ErrorContains(t, err, "ORCH_EMBEDDED_REDIS_ADDR")
	})

	t.Run("Localhost", func(t *testing.T) {
		t.Parallel()
		srv, err := embedredis.Start("localhost:0")
		require.NoError(t, err)
		srv.Close()
	})
}

// TestStreamsClient runs every stream operation of the orchestrator against the embedded
// server: the delivery path must behave as with Redis.
func TestStreamsClient(t *testing.T) {
	t.Parallel()
	_, sc := setup(t)
	ctx := t.Context()
	const stream, group = "noop", "cg:noop:workers"

	require.NoError(t, sc.EnsureGroup(ctx, stream, group))
	require.NoError(t, sc.EnsureGroup(ctx, stream, group), "BUSYGROUP is not an error")

	// A blocked read is woken by a publication.
	got := make(chan []streams.Delivery, 1)
	go func() {
		ds, err := sc.Read(ctx, streams.ReadParams{Group: group, Consumer: "w1", Streams: []string{stream}, Count: 10, Block: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- ds
	}()
	ids, err := sc.Publish(ctx, []streams.Message{
		{Stream: stream, JobID: "j1", Type: "noop", Attempt: 0},
		{Stream: stream, JobID: "j2", Type: "noop", Attempt: 1},
	})
	require.NoError(t, err)
	require.Len(t, ids, 2)
	var ds []streams.Delivery
	select {
	case ds = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("blocked read was not woken")
	}
	for len(ds) < 2 { // the read may have returned between the two XADDs
		more, err := sc.Read(ctx, streams.ReadParams{Group: group, Consumer: "w1", Streams: []string{stream}, Count: 10, Block: time.Second})
		require.NoError(t, err)
		ds = append(ds, more...)
	}
	require.Equal(t, "j1", ds[0].JobID)
	require.Equal(t, 1, ds[1].Attempt)

	n, err := sc.PendingCount(ctx, stream, group)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.NoError(t, sc.Touch(ctx, "w1", ds))

	// Nothing is idle long enough yet; with MinIdle 0 both move to the reclaimer.
	res, err := sc.AutoClaim(ctx, streams.AutoClaimParams{Stream: stream, Group: group, Consumer: "reclaimer", MinIdle: time.Hour, Count: 10})
	require.NoError(t, err)
	require.Empty(t, res.Claimed)
	res, err = sc.AutoClaim(ctx, streams.AutoClaimParams{Stream: stream, Group: group, Consumer: "reclaimer", Count: 10})
	require.NoError(t, err)
	require.Len(t, res.Claimed, 2)
	require.Empty(t, res.Deleted)

	require.NoError(t, sc.Ack(ctx, ds[:1]))
	n, err = sc.PendingCount(ctx, stream, group)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	// The trimmer keeps the pending entry (and everything after it).
	tr, err := sc.TrimUnneeded(ctx, stream, false)
	require.NoError(t, err)
	require.Equal(t, ids[1], tr.MinID)
	require.EqualValues(t, 1, tr.Removed)
	l, err := sc.Len(ctx, stream)
	require.NoError(t, err)
	require.EqualValues(t, 1, l)

	exists, err := sc.GroupExists(ctx, stream, group)
	require.NoError(t, err)
	require.True(t, exists)

	// The dead-letter queue: a stream no group reads.
	dlIDs, err := sc.AddDeadLetters(ctx, []streams.DeadLetter{{JobID: "j9", OriginStream: stream, Type: "noop", Attempts: 3, LastError: "boom"}})
	require.NoError(t, err)
	dls, err := sc.ListDeadLetters(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, "boom", dls[0].LastError)
	found, err := sc.DeadLettersExist(ctx, []string{dlIDs[0], "1-1"})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{dlIDs[0]: true, "1-1": false}, found)
	deleted, err := sc.DeleteDeadLetters(ctx, dlIDs...)
	require.NoError(t, err)
	require.EqualValues(t, 1, deleted)
}

// TestLimitations pins the differences from Redis that the package doc lists, so that an
// upgrade of miniredis that fixes (or changes) them is noticed.
func TestLimitations(t *testing.T) {
	t.Parallel()
	srv, sc := setup(t)
	ctx := t.Context()
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	const stream, group = "lim", "cg:lim:workers"
	require.NoError(t, sc.EnsureGroup(ctx, stream, group))
	ids, err := sc.Publish(ctx, []streams.Message{{Stream: stream, JobID: "a"}, {Stream: stream, JobID: "b"}, {Stream: stream, JobID: "c"}})
	require.NoError(t, err)
	_, err = sc.Read(ctx, streams.ReadParams{Group: group, Consumer: "w", Streams: []string{stream}, Count: 1, Block: time.Second})
	require.NoError(t, err)

	t.Run("NoLagInXInfoGroups", func(t *testing.T) {
		groups, err := raw.XInfoGroups(ctx, sc.StreamKey(stream)).Result()
		require.NoError(t, err)
		require.Len(t, groups, 1)
		require.EqualValues(t, 3, groups[0].Lag, "lag is the stream length, not the 2 unread entries")
	})

	t.Run("LastDeliveredIDOfUnusedGroupIsZero", func(t *testing.T) {
		// A group that never delivered an entry reports "0" (Redis: "0-0"); the trimmer
		// reads both (streams.TrimUnneeded), and trims nothing such a group still needs.
		const unused = "cg:lim:unused"
		require.NoError(t, sc.EnsureGroup(ctx, "unused", unused))
		groups, err := raw.XInfoGroups(ctx, sc.StreamKey("unused")).Result()
		require.NoError(t, err)
		require.Len(t, groups, 1)
		require.Equal(t, "0", groups[0].LastDeliveredID)
		_, err = sc.Publish(ctx, []streams.Message{{Stream: "unused", JobID: "x"}})
		require.NoError(t, err)
		tr, err := sc.TrimUnneeded(ctx, "unused", false)
		require.NoError(t, err)
		require.Equal(t, streams.TrimResult{MinID: "0-1"}, tr)
	})

	t.Run("RunIDFromHook", func(t *testing.T) {
		// miniredis has no INFO server; the package answers it, with a run_id new per start.
		id, err := sc.RunID(ctx)
		require.NoError(t, err)
		require.Equal(t, srv.RunID(), id)
		require.Len(t, id, 40)
		other, _ := setup(t)
		require.NotEqual(t, id, other.RunID())
		clients, err := raw.Info(ctx, "clients").Result()
		require.NoError(t, err)
		require.Contains(t, clients, "connected_clients", "other sections still reach miniredis")
	})

	t.Run("DeletedPendingEntryNotReported", func(t *testing.T) {
		require.NoError(t, raw.XDel(ctx, sc.StreamKey(stream), ids[0]).Err())
		res, err := sc.AutoClaim(ctx, streams.AutoClaimParams{Stream: stream, Group: group, Consumer: "r", Count: 10})
		require.NoError(t, err)
		require.Empty(t, res.Claimed)
		require.Empty(t, res.Deleted, "Redis 7 would report %s here", ids[0])
	})

	ctxDone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = sc.Read(ctxDone, streams.ReadParams{Group: group, Consumer: "w", Streams: []string{stream}, Count: 1, Block: time.Second})
	require.Error(t, err, "a cancelled read returns at once")
}
