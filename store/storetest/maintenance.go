package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testMaintenance runs the maintenance subtests one after the other: some statements
// (JobListDeadLetterUnpublished, the catch-all deletion) reach every row of the table, so they must not interleave with each other. Rows carry the
// subtest's prefix or type, and time-based deletions use instants in 2001..2009 that no other
// subtest uses.
func testMaintenance(t *testing.T, b *bundle) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *bundle)
	}{
		{"DeadLetterOutbox", testDeadLetterOutbox},
		{"DeadLetterPurge", testDeadLetterPurge},
		{"DeadLetterList", testDeadLetterList},
		{"Scan", testJobScan},
		{"ClearEnqueued", testClearEnqueued},
		{"DeleteTerminal", testDeleteTerminal},
		{"DeleteExceptTypes", testDeleteExceptTypes},
		{"LeaseDeleteEnded", testLeaseDeleteEnded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

// deadLetter inserts a job of type typ and moves it straight to dead_letter with enqueued=0,
// finished at `at`.
func (b *bundle) deadLetter(t *testing.T, name, typ string, at time.Time) store.Job {
	t.Helper()
	j := b.insert(t, name, func(p *store.JobInsertParams) { p.Type, p.Now, p.AvailableAt = typ, at, at })
	f, attempts := false, 2
	require.NoError(t, b.s.JobUpdate(t.Context(), store.JobUpdate{
		ID: j.ID, From: store.JobPending, To: store.JobDeadLetter, Attempts: &attempts,
		Enqueued: &f, FinishedAt: &at, Now: at,
	}))
	return b.get(t, j.ID)
}

func testDeadLetterOutbox(t *testing.T, b *bundle) {
	ctx := t.Context()
	typ := b.prefix + "dlo"
	a := b.deadLetter(t, "dlo-a", typ, b.now)
	c := b.deadLetter(t, "dlo-c", typ, b.now)
	pending := b.insert(t, "dlo-pending")

	unpublished, err := b.s.JobListDeadLetterUnpublished(ctx, 5000)
	require.NoError(t, err)
	require.Subset(t, ids(unpublished), []string{a.ID, c.ID})
	require.NotContains(t, ids(unpublished), pending.ID)
	for _, j := range unpublished {
		require.Nil(t, j.Payload, "the DLQ entry carries no payload: none is read")
	}

	// A mark applies only to a dead letter with enqueued=0 and the same attempts.
	marked, err := b.s.JobMarkDeadLetterPublished(ctx, []store.JobEnqueued{
		{ID: a.ID, Attempts: 2, StreamID: "1-1"},
		{ID: c.ID, Attempts: 1, StreamID: "1-2"}, // stale attempts
		{ID: pending.ID, Attempts: 0, StreamID: "1-3"},
		{ID: "nö", Attempts: 0, StreamID: "1-4"},
	}, b.now.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, marked)
	got := b.get(t, a.ID)
	require.True(t, got.Enqueued)
	require.Equal(t, "1-1", got.StreamID)
	require.False(t, b.get(t, c.ID).Enqueued)
	require.False(t, b.get(t, pending.ID).Enqueued)
	marked, err = b.s.JobMarkDeadLetterPublished(ctx, []store.JobEnqueued{{ID: a.ID, Attempts: 2, StreamID: "1-9"}}, b.now)
	require.NoError(t, err)
	require.Empty(t, marked, "a published dead letter is not marked twice")

	unpublished, err = b.s.JobListDeadLetterUnpublished(ctx, 5000)
	require.NoError(t, err)
	require.NotContains(t, ids(unpublished), a.ID)

	// After a Redis data loss: a dead letter whose DLQ entry is gone is published again.
	n, err := b.s.JobClearEnqueued(ctx, store.JobDeadLetter, []string{a.ID, c.ID, pending.ID}, b.now)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the published dead letter changes")
	got = b.get(t, a.ID)
	require.False(t, got.Enqueued)
	require.Equal(t, "1-1", got.StreamID, "the old entry id is kept until the next publication")
}

func testDeadLetterPurge(t *testing.T, b *bundle) {
	ctx := t.Context()
	typ := b.prefix + "dlp"
	a := b.deadLetter(t, "dlp-a", typ, b.now)
	pending := b.insert(t, "dlp-pending")

	require.NoError(t, b.s.JobMarkDeadLetterPurged(ctx, a.ID, b.now.Add(time.Minute)))
	got := b.get(t, a.ID)
	require.Equal(t, store.JobDeadLetter, got.Status)
	require.True(t, got.DeadLetterPurged())
	require.True(t, got.Enqueued, "a purged dead letter is not published again")
	requireTime(t, b.now.Add(time.Minute), got.UpdatedAt)

	require.ErrorIs(t, b.s.JobMarkDeadLetterPurged(ctx, a.ID, b.now), store.ErrConflict, "already purged")
	require.ErrorIs(t, b.s.JobMarkDeadLetterPurged(ctx, pending.ID, b.now), store.ErrConflict)
	require.ErrorIs(t, b.s.JobMarkDeadLetterPurged(ctx, b.id("missing"), b.now), store.ErrNotFound)

	// A purged dead letter is neither cleared nor listed as unpublished.
	n, err := b.s.JobClearEnqueued(ctx, store.JobDeadLetter, []string{a.ID}, b.now)
	require.NoError(t, err)
	require.Zero(t, n)
	require.True(t, b.get(t, a.ID).Enqueued)
	unpublished, err := b.s.JobListDeadLetterUnpublished(ctx, 5000)
	require.NoError(t, err)
	require.NotContains(t, ids(unpublished), a.ID)
}

func testDeadLetterList(t *testing.T, b *bundle) {
	ctx := t.Context()
	typ := b.prefix + "dll"
	var want []string
	for i := range 5 {
		j := b.deadLetter(t, "dll-"+string(rune('a'+i)), typ, b.now.Add(time.Duration(i)*time.Second))
		want = append([]string{j.ID}, want...) // newest first
	}
	purged := b.deadLetter(t, "dll-purged", typ, b.now)
	require.NoError(t, b.s.JobMarkDeadLetterPurged(ctx, purged.ID, b.now))
	b.insert(t, "dll-pending", func(p *store.JobInsertParams) { p.Type = typ })

	var got []string
	p := store.DeadLetterListParams{Type: typ, Limit: 2}
	for {
		page, err := b.s.JobListDeadLetters(ctx, p)
		require.NoError(t, err)
		got = append(got, ids(page)...)
		if len(page) < p.Limit {
			break
		}
		last := page[len(page)-1]
		p.After = &store.JobCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	require.Equal(t, want, got, "newest first, purged and live jobs left out")
}

func testJobScan(t *testing.T, b *bundle) {
	ctx := t.Context()
	typ := b.prefix + "scan"
	var want []string
	for i := range 7 {
		want = append(want, b.insert(t, "scan-"+string(rune('a'+i)), func(p *store.JobInsertParams) { p.Type = typ }).ID)
	}
	b.insert(t, "scan-other-type")
	claimed := b.insert(t, "scan-claimed", func(p *store.JobInsertParams) { p.Type = typ })
	require.NoError(t, b.update(t, store.JobUpdate{ID: claimed.ID, From: store.JobPending, To: store.JobClaimed}))

	var got []string
	p := store.JobScanParams{Type: typ, Status: store.JobPending, Limit: 3}
	for {
		page, err := b.s.JobScan(ctx, p)
		require.NoError(t, err)
		got = append(got, ids(page)...)
		if len(page) < p.Limit {
			break
		}
		p.AfterID = page[len(page)-1].ID
	}
	slices.Sort(want)
	require.Equal(t, want, got)

	page, err := b.s.JobScan(ctx, store.JobScanParams{Type: typ, Status: store.JobClaimed})
	require.NoError(t, err)
	require.Equal(t, []string{claimed.ID}, ids(page))
	require.Nil(t, page[0].Payload, "a scan reads no payload")
	require.Equal(t, store.JobClaimed, page[0].Status)
}

func testClearEnqueued(t *testing.T, b *bundle) {
	ctx := t.Context()
	a, c := b.insert(t, "clear-a"), b.insert(t, "clear-c")
	_, err := b.s.JobMarkEnqueued(ctx, []store.JobEnqueued{{ID: a.ID, StreamID: "1-1"}, {ID: c.ID, StreamID: "1-2"}})
	require.NoError(t, err)
	require.NoError(t, b.update(t, store.JobUpdate{ID: c.ID, From: store.JobPending, To: store.JobClaimed}))

	n, err := b.s.JobClearEnqueued(ctx, store.JobPending, []string{a.ID, c.ID, b.id("missing")}, b.now.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := b.get(t, a.ID)
	require.False(t, got.Enqueued)
	requireTime(t, b.now.Add(time.Hour), got.UpdatedAt)
	require.True(t, b.get(t, c.ID).Enqueued, "only pending jobs are cleared")
}

// finish moves a fresh job to a terminal status, finished at `at`.
func (b *bundle) finish(t *testing.T, name, typ string, to store.JobStatus, at time.Time) store.Job {
	t.Helper()
	j := b.insert(t, name, func(p *store.JobInsertParams) { p.Type, p.Now, p.AvailableAt = typ, at, at })
	require.NoError(t, b.s.JobUpdate(t.Context(), store.JobUpdate{
		ID: j.ID, From: store.JobPending, To: to, FinishedAt: &at, Now: at,
	}))
	return j
}

func (b *bundle) exists(t *testing.T, id string) bool {
	t.Helper()
	_, err := b.s.JobGet(t.Context(), id)
	if err != nil {
		require.ErrorIs(t, err, store.ErrNotFound)
		return false
	}
	return true
}

func testDeleteTerminal(t *testing.T, b *bundle) {
	ctx := t.Context()
	typ := b.prefix + "ret"
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	cutoff := old.Add(time.Hour)
	var oldDone []string
	for i := range 5 {
		oldDone = append(oldDone, b.finish(t, "ret-done-"+string(rune('a'+i)), typ, store.JobDone, old.Add(time.Duration(i)*time.Second)).ID)
	}
	young := b.finish(t, "ret-young", typ, store.JobDone, cutoff.Add(time.Second))
	cancelled := b.finish(t, "ret-cancelled", typ, store.JobCancelled, old)
	otherType := b.finish(t, "ret-other", b.prefix+"ret2", store.JobDone, old)
	live := b.insert(t, "ret-pending", func(p *store.JobInsertParams) { p.Type, p.Now = typ, old })
	dl := b.deadLetter(t, "ret-dl", typ, old)
	purged := b.deadLetter(t, "ret-purged", typ, old)
	require.NoError(t, b.s.JobMarkDeadLetterPurged(ctx, purged.ID, old))

	// Batches of 2: the oldest first, never more than the limit.
	del := func(p store.JobDeleteParams) int {
		t.Helper()
		n, err := b.s.JobDeleteTerminal(ctx, p)
		require.NoError(t, err)
		require.LessOrEqual(t, n, max(p.Limit, 0))
		return n
	}
	done := store.JobDeleteParams{Status: store.JobDone, Type: typ, Before: cutoff, Limit: 2}
	require.Equal(t, 2, del(done))
	require.False(t, b.exists(t, oldDone[0]))
	require.False(t, b.exists(t, oldDone[1]))
	require.True(t, b.exists(t, oldDone[2]))
	require.Equal(t, 2, del(done))
	require.Equal(t, 1, del(done))
	require.Equal(t, 0, del(done))
	require.True(t, b.exists(t, young.ID), "younger than the cutoff")
	require.True(t, b.exists(t, cancelled.ID), "another status")
	require.True(t, b.exists(t, otherType.ID), "another type")

	require.Equal(t, 0, del(store.JobDeleteParams{Status: store.JobPending, Type: typ, Before: cutoff, Limit: 10}),
		"non-terminal jobs are never deleted")
	require.True(t, b.exists(t, live.ID))

	require.Equal(t, 1, del(store.JobDeleteParams{Status: store.JobCancelled, Type: typ, Before: cutoff, Limit: 10}))
	require.False(t, b.exists(t, cancelled.ID))

	// Purged dead letters may go earlier than the others.
	require.Equal(t, 1, del(store.JobDeleteParams{Status: store.JobDeadLetter, Type: typ, PurgedOnly: true, Before: cutoff, Limit: 10}))
	require.False(t, b.exists(t, purged.ID))
	require.True(t, b.exists(t, dl.ID))
	require.Equal(t, 1, del(store.JobDeleteParams{Status: store.JobDeadLetter, Type: typ, Before: cutoff, Limit: 10}))
	require.False(t, b.exists(t, dl.ID))
}

func testDeleteExceptTypes(t *testing.T, b *bundle) {
	ctx := t.Context()
	old := time.Date(2003, 1, 1, 0, 0, 0, 0, time.UTC)
	kept := b.finish(t, "exc-kept", b.prefix+"known", store.JobDone, old)
	gone := b.finish(t, "exc-gone", b.prefix+"retired", store.JobDone, old)

	n, err := b.s.JobDeleteTerminal(ctx, store.JobDeleteParams{
		Status: store.JobDone, ExceptTypes: []string{b.prefix + "known"}, Before: old.Add(time.Minute), Limit: 100,
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1, "earlier subtests may leave old rows of other types behind")
	require.True(t, b.exists(t, kept.ID))
	require.False(t, b.exists(t, gone.ID))
}

// testAuditDeleteBefore runs on a store of its own (Run): a retention pass deletes the leading
// run of old rows in id order, so other subtests' rows would hold it back.
func testAuditDeleteBefore(t *testing.T, b *bundle) {
	ctx := t.Context()
	old := time.Date(2005, 1, 1, 0, 0, 0, 0, time.UTC)
	job := b.id("audit-ret")
	at := func(d time.Duration, typ string) store.AuditEvent {
		return store.AuditEvent{TS: old.Add(d), EventType: typ, JobID: job}
	}
	var events []store.AuditEvent
	for i := range 5 {
		events = append(events, at(time.Duration(i)*time.Minute, "test.old"))
	}
	// A young row (another instance's clock ahead), then an old one after it in id order: the
	// young row holds the old one back until it is old enough itself.
	events = append(events, at(time.Hour, "test.young"), at(time.Minute, "test.held"))
	require.NoError(t, b.s.AuditInsert(ctx, events))

	cutoff := old.Add(30 * time.Minute)
	total := deleteAll(t, 2, func(limit int) (int, error) { return b.s.AuditDeleteBefore(ctx, cutoff, limit) })
	require.Equal(t, 5, total)
	left, err := b.s.AuditList(ctx, store.AuditListParams{JobID: job})
	require.NoError(t, err)
	require.Equal(t, []string{"test.young", "test.held"}, auditTypes(left))

	total = deleteAll(t, 2, func(limit int) (int, error) { return b.s.AuditDeleteBefore(ctx, old.Add(2*time.Hour), limit) })
	require.Equal(t, 2, total)
}

func testLeaseDeleteEnded(t *testing.T, b *bundle) {
	ctx := t.Context()
	old := time.Date(2007, 1, 1, 0, 0, 0, 0, time.UTC)
	ended := func(name string, status store.LeaseStatus, at time.Time) store.Lease {
		l := b.lease(name, nil, 0)
		l.CreatedAt, l.LastHeartbeat, l.ExpiresAt = at.Add(-time.Minute), at.Add(-time.Minute), at
		l.Status, l.EndedAt = status, &at
		if status == store.LeaseActive {
			l.EndedAt = nil
		}
		return l
	}
	cutoff := old.Add(30 * time.Minute)
	leases := []store.Lease{
		ended("released-old", store.LeaseReleased, old),
		ended("expired-old", store.LeaseExpired, old.Add(time.Minute)),
		ended("released-young", store.LeaseReleased, old.Add(time.Hour)),
		ended("active-old", store.LeaseActive, old), // never deleted, however old
	}
	require.NoError(t, b.s.LeaseInsert(ctx, leases))

	total := deleteAll(t, 1, func(limit int) (int, error) { return b.s.LeaseDeleteEnded(ctx, cutoff, limit) })
	require.Equal(t, 2, total)
	for _, l := range leases {
		_, err := b.s.LeaseGet(ctx, l.Token, false)
		if strings.HasSuffix(l.Token, "-old") && l.Status != store.LeaseActive {
			require.ErrorIs(t, err, store.ErrNotFound, l.Token)
		} else {
			require.NoError(t, err, l.Token)
		}
	}
}

// deleteAll calls del with limit until it deletes nothing, checking that no call deletes more
// than limit, and returns how many rows it deleted in all.
func deleteAll(t *testing.T, limit int, del func(limit int) (int, error)) int {
	t.Helper()
	total := 0
	for {
		n, err := del(limit)
		require.NoError(t, err)
		require.LessOrEqual(t, n, limit)
		if n == 0 {
			return total
		}
		total += n
	}
}
