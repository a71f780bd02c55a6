package streams_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/embedredis"
	"github.com/gpuorch/orchestrator/streams"
)

// entryIDs returns the ids of every entry left in the stream.
func entryIDs(t *testing.T, sc *streams.Client, rdb redis.UniversalClient, stream string) []string {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), sc.StreamKey(stream), "-", "+").Result()
	require.NoError(t, err)
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// trimBackend opens a streams client on one kind of Redis.
type trimBackend struct {
	name  string
	setup func(t *testing.T) (*streams.Client, redis.UniversalClient)
}

// trimBackends are the Redis servers the trimmer runs on: the real one (the shared test
// server), and the embedded mode's in-process one, whose XINFO GROUPS answers differ (a group
// that never delivered an entry has last-delivered-id "0", not "0-0"; lag is not reported).
var trimBackends = []trimBackend{
	{"Redis", setup},
	{"Embedded", setupEmbedded},
}

// setupEmbedded starts an embedded Redis of the test's own and returns a client on it.
func setupEmbedded(t *testing.T) (*streams.Client, redis.UniversalClient) {
	t.Helper()
	srv, err := embedredis.Start("127.0.0.1:0")
	require.NoError(t, err)
	rdb := streams.NewRedis(srv.Addr(), "")
	t.Cleanup(func() {
		_ = rdb.Close()
		srv.Close()
	})
	return streams.New(rdb, streams.Options{Prefix: "t:"}), rdb
}

func TestTrimUnneeded(t *testing.T) {
	t.Parallel()
	for _, b := range trimBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testTrimUnneeded(t, b.setup)
		})
	}
}

func testTrimUnneeded(t *testing.T, setup func(t *testing.T) (*streams.Client, redis.UniversalClient)) {
	ctx := context.Background()

	t.Run("NoGroupNoTrim", func(t *testing.T) {
		t.Parallel()
		sc, rdb := setup(t)
		ids := publish(t, sc, "s", 3)
		res, err := sc.TrimUnneeded(ctx, "s", false)
		require.NoError(t, err)
		require.Equal(t, streams.TrimResult{}, res)
		require.Equal(t, ids, entryIDs(t, sc, rdb, "s"))

		res, err = sc.TrimUnneeded(ctx, "missing", false)
		require.NoError(t, err)
		require.Equal(t, streams.TrimResult{}, res)
	})

	t.Run("GroupNeverDelivered", func(t *testing.T) {
		// A configured type never used: its group exists but never delivered an entry, on an
		// empty stream and then on one with entries.
		t.Parallel()
		sc, rdb := setup(t)
		require.NoError(t, sc.EnsureGroup(ctx, "s", "idle"))
		res, err := sc.TrimUnneeded(ctx, "s", false)
		require.NoError(t, err)
		require.Equal(t, streams.TrimResult{MinID: "0-1"}, res, "nothing read, nothing to trim")

		ids := publish(t, sc, "s", 3)
		res, err = sc.TrimUnneeded(ctx, "s", false)
		require.NoError(t, err)
		require.Zero(t, res.Removed, "the idle group has read nothing")
		require.Equal(t, ids, entryIDs(t, sc, rdb, "s"))

		// A second group reads and acks everything: the idle one still needs every entry.
		require.NoError(t, sc.EnsureGroup(ctx, "s", "busy"))
		require.NoError(t, sc.Ack(ctx, read(t, sc, "s", "busy", "w", 3)))
		res, err = sc.TrimUnneeded(ctx, "s", false)
		require.NoError(t, err)
		require.Zero(t, res.Removed)
		require.Equal(t, ids, entryIDs(t, sc, rdb, "s"))
		require.Len(t, read(t, sc, "s", "idle", "w", 3), 3, "the idle group still gets every entry")
	})

	t.Run("KeepsPendingAndUndelivered", func(t *testing.T) {
		t.Parallel()
		sc, rdb := setup(t)
		require.NoError(t, sc.EnsureGroup(ctx, "s", "fast"))
		require.NoError(t, sc.EnsureGroup(ctx, "s", "slow"))
		ids := publish(t, sc, "s", 10)

		// fast read everything and acked all but ids[6]; slow read and acked three entries.
		fast := read(t, sc, "s", "fast", "w1", 10)
		require.NoError(t, sc.Ack(ctx, append(fast[:6:6], fast[7:]...)))
		require.NoError(t, sc.Ack(ctx, read(t, sc, "s", "slow", "w2", 3)))

		dry, err := sc.TrimUnneeded(ctx, "s", true)
		require.NoError(t, err)
		require.True(t, idLess(ids[2], dry.MinID) && !idLess(ids[3], dry.MinID),
			"the bound %s is right after slow's last read entry %s", dry.MinID, ids[2])
		require.Zero(t, dry.Removed)
		require.Len(t, entryIDs(t, sc, rdb, "s"), 10, "a dry run trims nothing")

		res, err := sc.TrimUnneeded(ctx, "s", false)
		require.NoError(t, err)
		require.EqualValues(t, 3, res.Removed, "slow has not read ids[3:]")
		require.Equal(t, ids[3:], entryIDs(t, sc, rdb, "s"))

		// slow catches up: now fast's pending ids[6] is the bound.
		require.NoError(t, sc.Ack(ctx, read(t, sc, "s", "slow", "w2", 7)))
		res, err = sc.TrimUnneeded(ctx, "s", false)
		require.NoError(t, err)
		require.Equal(t, ids[6], res.MinID)
		require.Equal(t, ids[6:], entryIDs(t, sc, rdb, "s"))

		// Everything acked: all read entries go, a new unread one stays.
		require.NoError(t, sc.Ack(ctx, fast[6:7]))
		newer := publish(t, sc, "s", 1)
		_, err = sc.TrimUnneeded(ctx, "s", false)
		require.NoError(t, err)
		require.Equal(t, newer, entryIDs(t, sc, rdb, "s"))
		require.Len(t, read(t, sc, "s", "fast", "w1", 1), 1, "the unread entry is still delivered")
	})

	t.Run("NeverDropsUnread", func(t *testing.T) {
		t.Parallel()
		// Random reads, acks, publications and trims on three groups; after every trim each
		// entry that some group has pending or not yet read must still be in the stream.
		sc, rdb := setup(t)
		groups := []string{"a", "b", "c"}
		for _, g := range groups {
			require.NoError(t, sc.EnsureGroup(ctx, "s", g))
		}
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, 0))
		pending := map[string][]streams.Delivery{}
		var published []string
		for step := range 200 {
			g := groups[rng.IntN(len(groups))]
			switch rng.IntN(4) {
			case 0:
				published = append(published, publish(t, sc, "s", 1+rng.IntN(5))...)
			case 1:
				ds, err := sc.Read(ctx, streams.ReadParams{Group: g, Consumer: "w", Streams: []string{"s"}, Count: 1 + rng.IntN(4), Block: time.Millisecond})
				require.NoError(t, err)
				pending[g] = append(pending[g], ds...)
			case 2:
				if n := len(pending[g]); n > 0 {
					i := rng.IntN(n)
					require.NoError(t, sc.Ack(ctx, pending[g][i:i+1]))
					pending[g] = append(pending[g][:i], pending[g][i+1:]...)
				}
			case 3:
				_, err := sc.TrimUnneeded(ctx, "s", false)
				require.NoError(t, err)
				requireNeeded(t, sc, rdb, published, fmt.Sprintf("seed %d step %d", seed, step))
			}
		}
	})
}

// requireNeeded checks that every entry some group still needs exists: its pending entries
// and every published entry after its last-delivered-id.
func requireNeeded(t *testing.T, sc *streams.Client, rdb redis.UniversalClient, published []string, msg string) {
	t.Helper()
	ctx := context.Background()
	key := sc.StreamKey("s")
	left := map[string]bool{}
	for _, id := range entryIDs(t, sc, rdb, "s") {
		left[id] = true
	}
	infos, err := rdb.XInfoGroups(ctx, key).Result()
	require.NoError(t, err)
	for _, g := range infos {
		pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: g.Name, Start: "-", End: "+", Count: 10000}).Result()
		require.NoError(t, err)
		for _, p := range pend {
			require.True(t, left[p.ID], "%s: pending entry %s of group %s was trimmed", msg, p.ID, g.Name)
		}
		for _, id := range published {
			if idLess(g.LastDeliveredID, id) {
				require.True(t, left[id], "%s: entry %s unread by group %s was trimmed", msg, id, g.Name)
			}
		}
	}
}

// idLess compares two stream ids; a bare "ms" (the embedded Redis's "0") is "ms-0".
func idLess(a, b string) bool {
	ams, aseq := parseID(a)
	bms, bseq := parseID(b)
	return ams < bms || (ams == bms && aseq < bseq)
}

func parseID(id string) (ms, seq uint64) {
	if _, err := fmt.Sscanf(id, "%d-%d", &ms, &seq); err == nil {
		return ms, seq
	}
	if _, err := fmt.Sscanf(id, "%d", &ms); err == nil && !strings.Contains(id, "-") {
		return ms, 0
	}
	panic("bad stream id " + id)
}
