package storetest

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testSchedules runs the conformance tests of schedules and their fires, each on schedules
// named with the subtest's prefix. The reads over every schedule (due, next fire, old fires)
// use instants no other subtest uses.
func testSchedules(t *testing.T, parent *bundle) {
	runAll(t, parent.s, []subtest{
		{"InsertGetUpdateDelete", testScheduleCRUD},
		{"List", testScheduleList},
		{"DueAndNextFire", testScheduleDue},
		{"FireUniqueOnScheduleAndTime", testScheduleFireUnique},
		{"FireListAndCount", testScheduleFireList},
		{"FireDeleteKeepsTheLast", testScheduleFireDelete},
		{"LockedWritesSerialise", testScheduleLocked},
	})
}

// schedule is a schedule of the subtest named name, due at next.
func (b *bundle) schedule(name string, next *time.Time) store.Schedule {
	return store.Schedule{
		ID: b.prefix + name, Agent: b.agent(), Cron: "@every 1m", Timezone: "UTC",
		Job:     []byte(`{"type":"noop","agent":"` + b.agent() + `","payload":{"n":1}}`),
		CatchUp: "once", CatchUpMax: 100, OnOverlap: "skip", NextFireAt: next,
		CreatedBy: "admin", CreatedAt: b.now, UpdatedAt: b.now,
	}
}

func testScheduleCRUD(t *testing.T, b *bundle) {
	ctx := t.Context()
	next := b.now.Add(time.Minute)
	s := b.schedule("a", &next)
	_, err := b.s.ScheduleGet(ctx, s.ID, false)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, b.s.ScheduleInsert(ctx, s))
	require.ErrorIs(t, b.s.ScheduleInsert(ctx, s), store.ErrConflict, "the id is taken")

	got, err := b.s.ScheduleGet(ctx, s.ID, false)
	require.NoError(t, err)
	requireTimePtr(t, &next, got.NextFireAt, "next_fire_at")
	requireTime(t, b.now, got.CreatedAt, "created_at")
	require.Nil(t, got.LastFireAt)
	require.JSONEq(t, string(s.Job), string(got.Job))
	s.NextFireAt, s.CreatedAt, s.UpdatedAt, s.Job = got.NextFireAt, got.CreatedAt, got.UpdatedAt, got.Job
	require.Equal(t, s, got)

	// Every mutable column round-trips; a nil time clears its column.
	last := b.now.Add(30 * time.Second)
	got.Agent, got.Cron, got.Timezone, got.CatchUp, got.CatchUpMax = "other", "*/5 * * * *", "Europe/Berlin", "all", 7
	got.MaxConcurrent, got.OnOverlap, got.RequirePreviousSuccess, got.Paused = 2, "queue", true, true
	got.NextFireAt, got.LastFireAt, got.LastJobID, got.UpdatedAt = nil, &last, "sch-x-1", b.now.Add(time.Hour)
	got.Job = []byte(`{"type":"sleep"}`)
	require.NoError(t, b.s.ScheduleUpdate(ctx, got))
	again, err := b.s.ScheduleGet(ctx, s.ID, false)
	require.NoError(t, err)
	require.Nil(t, again.NextFireAt)
	requireTimePtr(t, &last, again.LastFireAt, "last_fire_at")
	requireTime(t, b.now.Add(time.Hour), again.UpdatedAt, "updated_at")
	again.LastFireAt, again.UpdatedAt = got.LastFireAt, got.UpdatedAt
	require.JSONEq(t, string(got.Job), string(again.Job))
	again.Job = got.Job
	require.Equal(t, got, again)

	// Deleting takes the fires with it.
	require.NoError(t, b.s.ScheduleFireInsert(ctx, store.ScheduleFire{ScheduleID: s.ID, FireTime: b.now, State: store.FireSkipped,
		Reason: "overlap", CreatedAt: b.now}))
	require.NoError(t, b.s.ScheduleDelete(ctx, s.ID))
	require.ErrorIs(t, b.s.ScheduleDelete(ctx, s.ID), store.ErrNotFound)
	_, err = b.s.ScheduleFireGet(ctx, s.ID, b.now)
	require.ErrorIs(t, err, store.ErrNotFound)
	missing := b.schedule("missing", nil)
	require.ErrorIs(t, b.s.ScheduleUpdate(ctx, missing), store.ErrNotFound)
}

func testScheduleList(t *testing.T, b *bundle) {
	ctx := t.Context()
	for _, name := range []string{"c", "a", "b"} {
		require.NoError(t, b.s.ScheduleInsert(ctx, b.schedule(name, nil)))
	}
	other := b.schedule("d", nil)
	other.Agent = b.prefix + "other"
	require.NoError(t, b.s.ScheduleInsert(ctx, other))

	page, err := b.s.ScheduleList(ctx, store.ScheduleListParams{Agent: b.agent(), Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{b.prefix + "a", b.prefix + "b"}, scheduleIDs(page))
	page, err = b.s.ScheduleList(ctx, store.ScheduleListParams{Agent: b.agent(), After: page[1].ID, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{b.prefix + "c"}, scheduleIDs(page))
	all, err := b.s.ScheduleList(ctx, store.ScheduleListParams{After: b.prefix, Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, []string{b.prefix + "a", b.prefix + "b", b.prefix + "c", b.prefix + "d"}, mine(b, scheduleIDs(all)))
}

// mine keeps the ids of the subtest's own rows.
func mine(b *bundle, ids []string) []string {
	return slices.DeleteFunc(ids, func(id string) bool { return !strings.HasPrefix(id, b.prefix) })
}

func scheduleIDs(ss []store.Schedule) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

// testScheduleDue uses 1990: no other subtest's schedule is due that early.
func testScheduleDue(t *testing.T, b *bundle) {
	ctx := t.Context()
	base := time.Date(1990, 1, 1, 0, 0, 0, 500, time.UTC)
	early, late := base, base.Add(time.Hour)
	require.NoError(t, b.s.ScheduleInsert(ctx, b.schedule("late", &late)))
	require.NoError(t, b.s.ScheduleInsert(ctx, b.schedule("early", &early)))
	paused := b.schedule("paused", &early)
	paused.Paused = true
	require.NoError(t, b.s.ScheduleInsert(ctx, paused))
	require.NoError(t, b.s.ScheduleInsert(ctx, b.schedule("never", nil)))

	at, ok, err := b.s.ScheduleNextFire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	requireTime(t, early, at, "the earliest unpaused next fire")

	due, err := b.s.ScheduleListDue(ctx, base.Add(time.Minute), 100)
	require.NoError(t, err)
	require.Equal(t, []string{b.prefix + "early"}, mine(b, due))
	due, err = b.s.ScheduleListDue(ctx, late, 100)
	require.NoError(t, err)
	require.Equal(t, []string{b.prefix + "early", b.prefix + "late"}, mine(b, due), "earliest first, due at its instant")
}

func testScheduleFireUnique(t *testing.T, b *bundle) {
	ctx := t.Context()
	s := b.schedule("s", nil)
	require.NoError(t, b.s.ScheduleInsert(ctx, s))
	fired := b.now.Add(time.Second)
	f := store.ScheduleFire{ScheduleID: s.ID, FireTime: b.now, State: store.FireRunning, JobID: "sch-1", Reason: "due",
		CreatedAt: fired, FiredAt: &fired}
	require.NoError(t, b.s.ScheduleFireInsert(ctx, f))
	dup := f
	dup.JobID, dup.State = "sch-2", store.FireSkipped
	require.ErrorIs(t, b.s.ScheduleFireInsert(ctx, dup), store.ErrConflict, "one row per (schedule, fire time)")
	dup.FireTime = b.now.Add(time.Microsecond)
	require.NoError(t, b.s.ScheduleFireInsert(ctx, dup), "a microsecond later is another fire time")

	got, err := b.s.ScheduleFireGet(ctx, s.ID, b.now)
	require.NoError(t, err)
	requireTime(t, b.now, got.FireTime, "fire_time")
	requireTimePtr(t, &fired, got.FiredAt, "fired_at")
	require.Equal(t, store.FireRunning, got.State)
	require.Equal(t, "sch-1", got.JobID)

	got.State, got.JobStatus = store.FireEnded, string(store.JobDone)
	require.NoError(t, b.s.ScheduleFireUpdate(ctx, got))
	again, err := b.s.ScheduleFireGet(ctx, s.ID, b.now)
	require.NoError(t, err)
	require.Equal(t, store.FireEnded, again.State)
	require.Equal(t, "done", again.JobStatus)
	missing := got
	missing.FireTime = b.now.Add(time.Hour)
	require.ErrorIs(t, b.s.ScheduleFireUpdate(ctx, missing), store.ErrNotFound)
}

func testScheduleFireList(t *testing.T, b *bundle) {
	ctx := t.Context()
	s := b.schedule("s", nil)
	require.NoError(t, b.s.ScheduleInsert(ctx, s))
	states := []store.FireState{store.FireQueued, store.FireRunning, store.FireQueued, store.FireEnded}
	for i, st := range states {
		require.NoError(t, b.s.ScheduleFireInsert(ctx, store.ScheduleFire{ScheduleID: s.ID, FireTime: b.now.Add(time.Duration(i) * time.Second),
			State: st, CreatedAt: b.now}))
	}
	queued, err := b.s.ScheduleFireList(ctx, store.ScheduleFireListParams{ScheduleID: s.ID, State: store.FireQueued})
	require.NoError(t, err)
	require.Len(t, queued, 2)
	requireTime(t, b.now, queued[0].FireTime, "oldest first")
	newest, err := b.s.ScheduleFireList(ctx, store.ScheduleFireListParams{ScheduleID: s.ID, Newest: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, newest, 1)
	requireTime(t, b.now.Add(3*time.Second), newest[0].FireTime, "newest first")
	counts, err := b.s.ScheduleFireCount(ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, map[store.FireState]int{store.FireQueued: 2, store.FireRunning: 1, store.FireEnded: 1}, counts)
}

// testScheduleFireDelete uses fire times in 1991: no other subtest's are that old.
func testScheduleFireDelete(t *testing.T, b *bundle) {
	ctx := t.Context()
	base := time.Date(1991, 1, 1, 0, 0, 0, 0, time.UTC)
	s := b.schedule("s", nil)
	last := base.Add(3 * time.Second)
	s.LastFireAt = &last
	require.NoError(t, b.s.ScheduleInsert(ctx, s))
	states := []store.FireState{store.FireEnded, store.FireSkipped, store.FireRunning, store.FireEnded, store.FireEnded}
	for i, st := range states {
		require.NoError(t, b.s.ScheduleFireInsert(ctx, store.ScheduleFire{ScheduleID: s.ID, FireTime: base.Add(time.Duration(i) * time.Second),
			State: st, CreatedAt: base}))
	}
	// Before base+4s: the ended and skipped fires at +0s and +1s go; the running one at +2s
	// and the last fire (+3s) stay, and +4s is not old enough.
	n := 0
	for {
		k, err := b.s.ScheduleFireDeleteBefore(ctx, base.Add(4*time.Second), 1)
		require.NoError(t, err)
		if k == 0 {
			break
		}
		n += k
	}
	require.Equal(t, 2, n)
	left, err := b.s.ScheduleFireList(ctx, store.ScheduleFireListParams{ScheduleID: s.ID})
	require.NoError(t, err)
	require.Len(t, left, 3)
	requireTime(t, base.Add(2*time.Second), left[0].FireTime, "the running fire stays")
	requireTime(t, last, left[1].FireTime, "the last fire stays")
}

// testScheduleLocked: transactions that lock a schedule's row (as the firer and a manual trigger
// do) and then write a fire run one after the other: the second sees the first's fire.
func testScheduleLocked(t *testing.T, b *bundle) {
	ctx := t.Context()
	s := b.schedule("s", nil)
	require.NoError(t, b.s.ScheduleInsert(ctx, s))
	const writers = 4
	var (
		wg   sync.WaitGroup
		errs = make([]error, writers)
		made = make([]bool, writers)
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.s.WithTx(ctx, func(tx store.Tx) error {
				if _, err := tx.ScheduleGet(ctx, s.ID, true); err != nil {
					return err
				}
				_, err := tx.ScheduleFireGet(ctx, s.ID, b.now)
				switch {
				case err == nil:
					made[i] = false
					return nil // fired already
				case !errors.Is(err, store.ErrNotFound):
					return err
				}
				made[i] = true
				return tx.ScheduleFireInsert(ctx, store.ScheduleFire{ScheduleID: s.ID, FireTime: b.now, State: store.FireRunning,
					CreatedAt: b.now})
			})
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	n := 0
	for _, m := range made {
		if m {
			n++
		}
	}
	require.Equal(t, 1, n, "exactly one writer made the fire")
}
