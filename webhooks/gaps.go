package webhooks

import (
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// The audit trail's ids are assigned when a row is inserted, and its transaction commits
// later, or rolls back and never does: a reader that sees id 12 may not see 11 yet, and may
// never see it. The tail therefore never jumps over an id that may still commit: every id
// missing below the highest id it read is a gap, kept in the cursor with when it was first
// found missing, and read again on every pass until it shows up (a late commit: its event is
// queued then) or gapWindow has passed (a rollback, most likely; it is given up).

// MaxGapsDefault bounds the open gaps a cursor keeps. In-flight transactions hold a few ids
// each; a jump of more (an auto-increment that leapt, a mass rollback) keeps the highest ids
// below the row that revealed it, which are the ones a transaction may still hold.
const MaxGapsDefault = 10000

// advance is the tail's move over one pass: from cur, having read rows (the ids after
// cur.LastID, in id order) and found (the rows of cur's gaps that committed since), at now.
// It returns the next cursor and how many gaps it gave up, past window or over maxGaps.
func advance(cur store.WebhookCursor, rows, found []store.AuditEvent, now time.Time, window time.Duration,
	maxGaps int) (next store.WebhookCursor, givenUp int) {
	filled := make(map[int64]bool, len(found))
	for _, ev := range found {
		filled[ev.ID] = true
	}
	next = store.WebhookCursor{LastID: cur.LastID, Version: cur.Version}
	for _, g := range cur.Gaps {
		switch {
		case filled[g.ID]:
		case now.Sub(g.FirstSeen) > window:
			givenUp++
		default:
			next.Gaps = append(next.Gaps, g)
		}
	}
	for _, ev := range rows {
		if ev.ID <= next.LastID {
			continue
		}
		from := next.LastID + 1
		if missing := ev.ID - from; missing > int64(maxGaps) {
			givenUp += int(missing - int64(maxGaps))
			from = ev.ID - int64(maxGaps)
		}
		for id := from; id < ev.ID; id++ {
			next.Gaps = append(next.Gaps, store.WebhookGap{ID: id, FirstSeen: now})
		}
		next.LastID = ev.ID
	}
	if over := len(next.Gaps) - maxGaps; over > 0 {
		// The oldest ids first: the further below the cursor, the less likely to commit.
		slices.SortFunc(next.Gaps, func(a, b store.WebhookGap) int { return int(a.ID - b.ID) })
		next.Gaps = next.Gaps[over:]
		givenUp += over
	}
	return next, givenUp
}

// sameCursor reports whether a and b say the same (versions aside).
func sameCursor(a, b store.WebhookCursor) bool {
	return a.LastID == b.LastID && slices.EqualFunc(a.Gaps, b.Gaps, func(x, y store.WebhookGap) bool {
		return x.ID == y.ID && x.FirstSeen.Equal(y.FirstSeen)
	})
}

// gapIDs are the ids of gaps.
func gapIDs(gaps []store.WebhookGap) []int64 {
	ids := make([]int64, len(gaps))
	for i, g := range gaps {
		ids[i] = g.ID
	}
	return ids
}
