package reclaimer

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/streams"
)

func TestTrimmer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	require.NoError(t, b.sc.EnsureGroup(ctx, "noop", b.group))
	for range 6 {
		b.submit(t)
	}
	// A worker acked the first three entries, holds the fourth, and has not read the rest.
	ds := b.read(t, 4)
	require.NoError(t, b.sc.Ack(ctx, ds[:3]))
	_, err := b.sc.AddDeadLetters(ctx, []streams.DeadLetter{{JobID: "old", Type: "noop"}})
	require.NoError(t, err)

	now := time.Now()
	tr := NewTrimmer(b.sc, TrimmerConfigFrom(b.cfg, TrimmerConfig{
		Now: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler),
	}))
	res, err := tr.runOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, res["noop"], "the acknowledged entries")
	require.Zero(t, res[streams.DLQStream], "a fresh dead letter stays")
	for _, s := range []string{"inference_jobs", "preloads", "ingest_events", "sleep"} {
		require.Zero(t, res[s], "streams without entries or groups are left alone")
	}
	n, err := b.sc.Len(ctx, "noop")
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "the held entry and the two unread ones stay")
	rest, err := b.sc.Read(ctx, streams.ReadParams{Group: b.group, Consumer: "w2", Streams: []string{"noop"}, Count: 10, Block: 10 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, rest, 2, "unread entries are still delivered")

	// Dead letters go with age.
	now = now.Add(b.cfg.DeadLetterRetention + time.Minute)
	res, err = tr.runOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, res[streams.DLQStream])
	require.Zero(t, res["noop"], "everything left is pending")
}
