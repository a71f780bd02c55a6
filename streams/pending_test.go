package streams_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/embedredis"
	"github.com/gpuorch/orchestrator/streams"
)

// TestDelivered runs against the real Redis and the embedded mode's one: an entry counts as
// delivered to the consumer that read it, until acked, and to no other consumer.
func TestDelivered(t *testing.T) {
	t.Parallel()
	for name, sc := range map[string]func(t *testing.T) *streams.Client{
		"Redis": func(t *testing.T) *streams.Client { sc, _ := setup(t); return sc },
		"Embedded": func(t *testing.T) *streams.Client {
			srv, err := embedredis.Start("127.0.0.1:0")
			require.NoError(t, err)
			rdb := streams.NewRedis(srv.Addr(), "")
			t.Cleanup(func() { _ = rdb.Close(); srv.Close() })
			return streams.New(rdb, streams.Options{Prefix: "t:"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sc := sc(t)
			require.NoError(t, sc.EnsureGroup(ctx, "s", "g"))
			ids := publish(t, sc, "s", 3)
			w1 := read(t, sc, "s", "g", "w1", 2) // ids[0], ids[1]
			require.NoError(t, sc.Ack(ctx, w1[1:]))

			entry := func(consumer, id string) streams.PendingEntry {
				return streams.PendingEntry{Stream: "s", Group: "g", Consumer: consumer, ID: id}
			}
			got, err := sc.Delivered(ctx, []streams.PendingEntry{
				entry("w1", ids[0]), // read by w1, not acked
				entry("w2", ids[0]), // another consumer's
				entry("w1", ids[1]), // acked
				entry("w1", ids[2]), // never read
				entry("w1", "1-0"),  // invented
				entry("w1", "nonsense"),
				entry("", ids[0]), // no consumer: never a match
				{Stream: "s", Group: "no-group", Consumer: "w1", ID: ids[0]},
				{Stream: "no-stream", Group: "g", Consumer: "w1", ID: ids[0]},
			})
			require.NoError(t, err)
			require.Equal(t, []bool{true, false, false, false, false, false, false, false, false}, got)

			got, err = sc.Delivered(ctx, nil)
			require.NoError(t, err)
			require.Empty(t, got)
		})
	}
}
