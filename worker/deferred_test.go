package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/streams"
)

// TestByPriority: the highest effective priority first, the oldest first within a level, and a
// job's priority rises by one level per priorityAging it has waited, up to 9.
func TestByPriority(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(10_000_000)
	at := func(ago time.Duration) string { return streams.EntryIDAt(now.Add(-ago)) }
	ds := []streams.Delivery{
		{JobID: "new-0", ID: at(time.Second)},
		{JobID: "new-5", ID: at(2 * time.Second), Priority: 5},
		{JobID: "old-0", ID: at(6*priorityAging + time.Second)}, // effective 6
		{JobID: "older-0", ID: at(30 * priorityAging)},          // effective 9 (capped)
		{JobID: "new-9", ID: at(3 * time.Second), Priority: 9},
		{JobID: "newer-5", ID: at(time.Second), Priority: 5},
	}
	byPriority(ds, now)
	var order []string
	for _, d := range ds {
		order = append(order, d.JobID)
	}
	require.Equal(t, []string{"older-0", "new-9", "old-0", "new-5", "newer-5", "new-0"}, order)
}
