package webhooks

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

func rows(ids ...int64) []store.AuditEvent {
	out := make([]store.AuditEvent, len(ids))
	for i, id := range ids {
		out[i] = store.AuditEvent{ID: id}
	}
	return out
}

func gapIDsOf(c store.WebhookCursor) []int64 { return gapIDs(c.Gaps) }

func TestAdvance(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const window = time.Minute

	// Ids missing below the highest read become gaps, seen now.
	next, gone := advance(store.WebhookCursor{LastID: 10}, rows(11, 13, 16), nil, t0, window, 100)
	require.Equal(t, int64(16), next.LastID)
	require.Equal(t, []int64{12, 14, 15}, gapIDsOf(next))
	require.Zero(t, gone)
	require.Equal(t, t0, next.Gaps[0].FirstSeen)

	// A gap that commits is dropped from the gaps; one past the window is given up; the others
	// keep their first sighting.
	next, gone = advance(next, rows(17), rows(14), t0.Add(30*time.Second), window, 100)
	require.Equal(t, []int64{12, 15}, gapIDsOf(next))
	require.Zero(t, gone)
	require.Equal(t, t0, next.Gaps[0].FirstSeen)
	next, gone = advance(next, nil, nil, t0.Add(window+time.Second), window, 100)
	require.Empty(t, next.Gaps)
	require.Equal(t, 2, gone)
	require.Equal(t, int64(17), next.LastID, "no row read: the cursor stays")

	// A jump past the cap keeps the ids right below the row; too many gaps drop the oldest.
	next, gone = advance(store.WebhookCursor{LastID: 0}, rows(1000), nil, t0, window, 3)
	require.Equal(t, []int64{997, 998, 999}, gapIDsOf(next))
	require.Equal(t, 996, gone)
	next, gone = advance(next, rows(1002), nil, t0, window, 3)
	require.Equal(t, []int64{998, 999, 1001}, gapIDsOf(next))
	require.Equal(t, 1, gone)

	// Nothing new: the same cursor.
	same, _ := advance(next, nil, nil, t0, window, 3)
	require.True(t, sameCursor(next, same))
}
