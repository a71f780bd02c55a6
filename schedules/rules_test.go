package schedules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// TestPlanFires: an every-minute schedule whose cursor is at 10:00, planned at 10:10:30 with a
// grace of 2 minutes: 10:09 and 10:10 are on time, 10:00 to 10:08 (nine fire times) were
// missed.
func TestPlanFires(t *testing.T) {
	t.Parallel()
	c, err := ParseCron("* * * * *", "")
	require.NoError(t, err)
	base := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	now := base.Add(10*time.Minute + 30*time.Second)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	onTime := []due{{at(9), ReasonDue}, {at(10), ReasonDue}}
	next := at(11)

	for _, tc := range []struct {
		name    string
		catchUp string
		max     int
		fires   []due
		drop    dropped
	}{
		{"Skip", CatchUpSkip, 100, onTime, dropped{SkipMissed, 9, at(0), at(8)}},
		{"Once", CatchUpOnce, 100, append([]due{{at(8), ReasonCatchUp}}, onTime...), dropped{SkipMissed, 8, at(0), at(7)}},
		{"AllUnderTheCap", CatchUpAll, 100, append(catchUps(at, 0, 8), onTime...), dropped{}},
		{"AllAtTheCap", CatchUpAll, 9, append(catchUps(at, 0, 8), onTime...), dropped{}},
		{"AllOverTheCapKeepsTheLatest", CatchUpAll, 3, append(catchUps(at, 6, 8), onTime...),
			dropped{SkipCatchUpMax, 6, at(0), at(5)}},
		{"AllCapOfOne", CatchUpAll, 1, append(catchUps(at, 8, 8), onTime...), dropped{SkipCatchUpMax, 8, at(0), at(7)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planFires(c, base, now, 2*time.Minute, tc.catchUp, tc.max)
			require.Equal(t, tc.fires, p.fires)
			require.Equal(t, tc.drop, p.drop)
			require.Equal(t, next, p.next)
		})
	}

	t.Run("NothingDue", func(t *testing.T) {
		p := planFires(c, at(11), now, time.Minute, CatchUpAll, 100)
		require.Empty(t, p.fires)
		require.Zero(t, p.drop.count)
		require.Equal(t, at(11), p.next, "the cursor stays")
	})
	t.Run("DueExactlyNow", func(t *testing.T) {
		p := planFires(c, at(10), at(10), time.Minute, CatchUpSkip, 100)
		require.Equal(t, []due{{at(10), ReasonDue}}, p.fires)
		require.Equal(t, at(11), p.next)
	})
	t.Run("GraceIsInclusive", func(t *testing.T) {
		p := planFires(c, at(9), at(10), time.Minute, CatchUpSkip, 100)
		require.Equal(t, []due{{at(9), ReasonDue}, {at(10), ReasonDue}}, p.fires)
	})
}

func catchUps(at func(int) time.Time, from, to int) []due {
	var out []due
	for m := from; m <= to; m++ {
		out = append(out, due{at(m), ReasonCatchUp})
	}
	return out
}

// TestPlanFiresLongOutage: an every-second schedule missed for three days (259,200 fire times)
// is walked in parts of scanMax: each part but the last is dropped whole, and the last applies
// catch_up to the latest ones.
func TestPlanFiresLongOutage(t *testing.T) {
	t.Parallel()
	c, err := ParseCron("@every 1s", "")
	require.NoError(t, err)
	cursor := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	now := cursor.Add(72 * time.Hour)
	dropped, parts := 0, 0
	var p plan
	for {
		p = planFires(c, cursor, now, time.Minute, CatchUpAll, 5)
		parts++
		dropped += p.drop.count
		if !p.next.IsZero() && !p.next.After(now) {
			require.Empty(t, p.fires, "a part before the last fires nothing")
			cursor = p.next
			continue
		}
		break
	}
	require.Equal(t, 3, parts)
	require.Len(t, p.fires, 5+61, "the 5 latest missed, then the minute of grace (its ends included)")
	require.Equal(t, ReasonCatchUp, p.fires[0].reason)
	require.Equal(t, now.Add(-65*time.Second), p.fires[0].at)
	require.Equal(t, now, p.fires[len(p.fires)-1].at)
	require.Equal(t, 72*3600+1-len(p.fires), dropped, "every other fire time is dropped, and counted")
	require.Equal(t, now.Add(time.Second), p.next)
}

func TestDecide(t *testing.T) {
	t.Parallel()
	limit := func(n int, overlap string) Rules { return Rules{MaxConcurrent: n, OnOverlap: overlap, MaxQueued: 2} }
	prev := func(overlap string) Rules {
		return Rules{RequirePreviousSuccess: true, OnOverlap: overlap, MaxQueued: 2}
	}
	done, failed, gone := string(store.JobDone), string(store.JobDeadLetter), JobGone
	for _, tc := range []struct {
		name   string
		rules  Rules
		load   Load
		queued bool
		act    Action
		why    string
	}{
		{"NoLimit", Rules{OnOverlap: OverlapSkip}, Load{Running: 50}, false, ActFire, ""},
		{"UnderTheLimit", limit(2, OverlapSkip), Load{Running: 1}, false, ActFire, ""},
		{"OverlapSkip", limit(2, OverlapSkip), Load{Running: 2}, false, ActSkip, SkipOverlap},
		{"OverlapQueue", limit(2, OverlapQueue), Load{Running: 2, Queued: 1}, false, ActQueue, ""},
		{"OverlapQueueFull", limit(2, OverlapQueue), Load{Running: 2, Queued: 2}, false, ActSkip, SkipQueueFull},
		{"QueuedStaysQueued", limit(2, OverlapQueue), Load{Running: 2, Queued: 5}, true, ActQueue, ""},
		{"QueuedGoes", limit(2, OverlapQueue), Load{Running: 1, Queued: 1}, true, ActFire, ""},
		{"PreviousNone", prev(OverlapSkip), Load{}, false, ActFire, ""},
		{"PreviousDone", prev(OverlapSkip), Load{Previous: done}, false, ActFire, ""},
		{"PreviousFailed", prev(OverlapQueue), Load{Previous: failed}, false, ActSkip, SkipPreviousFailed},
		{"PreviousCancelled", prev(OverlapSkip), Load{Previous: string(store.JobCancelled)}, false, ActSkip, SkipPreviousFailed},
		{"PreviousGone", prev(OverlapSkip), Load{Previous: gone}, false, ActSkip, SkipPreviousFailed},
		{"PreviousRunningSkip", prev(OverlapSkip), Load{Previous: prevUnfinished, Running: 1}, false, ActSkip, SkipPreviousRunning},
		{"PreviousRunningQueue", prev(OverlapQueue), Load{Previous: prevUnfinished, Running: 1}, false, ActQueue, ""},
		{"QueuedPreviousFailed", prev(OverlapQueue), Load{Previous: failed, Queued: 1}, true, ActSkip, SkipPreviousFailed},
		{"PreviousDoneButTheLimit", Rules{RequirePreviousSuccess: true, MaxConcurrent: 1, OnOverlap: OverlapSkip},
			Load{Previous: done, Running: 1}, false, ActSkip, SkipOverlap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			act, why := decide(tc.rules, tc.load, tc.queued)
			require.Equal(t, tc.act, act)
			require.Equal(t, tc.why, why)
		})
	}
}
