package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// listFixture inserts n jobs of the subtest's agent: created_at in groups of three equal
// instants (so ties are broken by id), types alternating a/b, every third job claimed. It
// returns them in listing order (created_at DESC, job_id DESC).
func listFixture(t *testing.T, b *bundle, n int) []store.Job {
	t.Helper()
	var jobs []store.Job
	for i := range n {
		created := b.now.Add(time.Duration(i/3) * time.Second)
		typ := b.prefix + "a"
		if i%2 == 1 {
			typ = b.prefix + "b"
		}
		// Ids are not in creation order, so that the tie-break is visible.
		name := fmt.Sprintf("j%02d", (i*7)%n)
		j := b.insert(t, name, func(p *store.JobInsertParams) { p.Now = created; p.Type = typ })
		if i%3 == 0 {
			require.NoError(t, b.update(t, store.JobUpdate{ID: j.ID, From: store.JobPending, To: store.JobClaimed, Now: created}))
			j.Status = store.JobClaimed
		}
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(x, y store.Job) int {
		if c := y.CreatedAt.Compare(x.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(y.ID, x.ID)
	})
	return jobs
}

// listAll pages through a listing with the given page size, following the keyset cursor.
func listAll(t *testing.T, b *bundle, p store.JobListParams) []store.Job {
	t.Helper()
	var all []store.Job
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100, "pagination does not end")
		page, err := b.s.JobList(t.Context(), p)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), p.Limit)
		all = append(all, page...)
		if len(page) < p.Limit {
			return all
		}
		last := page[len(page)-1]
		p.After = &store.JobCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

func testListPagination(t *testing.T, b *bundle) {
	want := listFixture(t, b, 23)
	for _, size := range []int{1, 3, 5, 23, 50} {
		got := listAll(t, b, store.JobListParams{Agent: b.agent(), Limit: size})
		require.Equal(t, ids(want), ids(got), "page size %d", size)
	}
	// Limit 0 is the default (100), which holds them all.
	got, err := b.s.JobList(t.Context(), store.JobListParams{Agent: b.agent()})
	require.NoError(t, err)
	require.Equal(t, ids(want), ids(got))
	for i := range want {
		requireSameJob(t, want[i], got[i])
	}
	// A cursor in the middle of a tie continues with the smaller ids of the same instant.
	mid := want[4]
	got, err = b.s.JobList(t.Context(), store.JobListParams{
		Agent: b.agent(), Limit: 100, After: &store.JobCursor{CreatedAt: mid.CreatedAt, ID: mid.ID},
	})
	require.NoError(t, err)
	require.Equal(t, ids(want[5:]), ids(got))
}

func testListFilters(t *testing.T, b *bundle) {
	all := listFixture(t, b, 12)
	filter := func(keep func(store.Job) bool) []string {
		var out []string
		for _, j := range all {
			if keep(j) {
				out = append(out, j.ID)
			}
		}
		return out
	}
	typeA := b.prefix + "a"
	cases := []struct {
		name string
		p    store.JobListParams
		keep func(store.Job) bool
	}{
		{"Type", store.JobListParams{Type: typeA}, func(j store.Job) bool { return j.Type == typeA }},
		{"StatusAgent", store.JobListParams{Agent: b.agent(), Status: store.JobClaimed},
			func(j store.Job) bool { return j.Status == store.JobClaimed }},
		{"TypeStatus", store.JobListParams{Type: typeA, Status: store.JobPending},
			func(j store.Job) bool { return j.Type == typeA && j.Status == store.JobPending }},
		{"AllThree", store.JobListParams{Agent: b.agent(), Type: b.prefix + "b", Status: store.JobClaimed},
			func(j store.Job) bool { return j.Type == b.prefix+"b" && j.Status == store.JobClaimed }},
	}
	for _, tc := range cases {
		tc.p.Limit = 2
		require.Equal(t, filter(tc.keep), ids(listAll(t, b, tc.p)), tc.name)
	}
	got, err := b.s.JobList(t.Context(), store.JobListParams{Agent: b.prefix + "nobody"})
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = b.s.JobList(t.Context(), store.JobListParams{Agent: strings.ToUpper(b.agent())})
	require.NoError(t, err)
	require.Empty(t, got, "filters match exactly, not case-insensitively")
}

func testListDispatchable(t *testing.T, b *bundle) {
	// 1990: no other subtest has jobs available this early.
	base := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) func(*store.JobInsertParams) {
		return func(p *store.JobInsertParams) { p.AvailableAt = base.Add(d); p.Now = base }
	}
	d1 := b.insert(t, "d1", at(3*time.Second))
	d2 := b.insert(t, "d2", at(1*time.Second))
	d3 := b.insert(t, "d3", at(2*time.Second))
	b.insert(t, "future", at(time.Hour))
	enq := b.insert(t, "enqueued", at(500*time.Millisecond))
	n, err := b.s.JobMarkEnqueued(t.Context(), []store.JobEnqueued{{ID: enq.ID, Attempts: 0, StreamID: "1-0"}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	claimed := b.insert(t, "claimed", at(200*time.Millisecond))
	require.NoError(t, b.update(t, store.JobUpdate{ID: claimed.ID, From: store.JobPending, To: store.JobClaimed}))

	now := base.Add(10 * time.Second)
	got, err := b.s.JobListDispatchable(t.Context(), store.DispatchParams{Now: now, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{d2.ID, d3.ID, d1.ID}, ids(got))
	require.NotEmpty(t, d2.Payload)
	d2.Payload = nil // publishing needs none
	requireSameJob(t, d2, got[0])

	got, err = b.s.JobListDispatchable(t.Context(), store.DispatchParams{Now: now, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{d2.ID, d3.ID}, ids(got))

	// available_at == now is due; one microsecond earlier it is not.
	got, err = b.s.JobListDispatchable(t.Context(), store.DispatchParams{Now: base.Add(2 * time.Second), Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{d2.ID, d3.ID}, ids(got))
	got, err = b.s.JobListDispatchable(t.Context(), store.DispatchParams{Now: base.Add(time.Second - time.Microsecond), Limit: 100})
	require.NoError(t, err)
	require.Empty(t, got)

	// SubmittedBy: a job never attempted waits until it was created at or before it (its
	// submit publishes it); a retry is due at its available_at whenever it was created.
	late := func(p *store.JobInsertParams) {
		p.AvailableAt = base.Add(time.Second)
		p.Now = base.Add(4 * time.Second)
	}
	fresh := b.insert(t, "fresh", late)
	retry := b.insert(t, "retry", late)
	require.NoError(t, b.update(t, store.JobUpdate{ID: retry.ID, From: store.JobPending, To: store.JobPending, Attempts: new(1)}))
	got, err = b.s.JobListDispatchable(t.Context(), store.DispatchParams{Now: now, SubmittedBy: base.Add(4*time.Second - time.Microsecond), Limit: 100})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{retry.ID, d2.ID, d3.ID, d1.ID}, ids(got), "created after SubmittedBy, never attempted: not yet")
	got, err = b.s.JobListDispatchable(t.Context(), store.DispatchParams{Now: now, SubmittedBy: base.Add(4 * time.Second), Limit: 100})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{fresh.ID, retry.ID, d2.ID, d3.ID, d1.ID}, ids(got), "created at SubmittedBy: due")
}

func testMarkEnqueued(t *testing.T, b *bundle) {
	match := b.insert(t, "match")
	match2 := b.insert(t, "match2")
	retried := b.insert(t, "retried") // attempts moved on since the publication
	require.NoError(t, b.update(t, store.JobUpdate{ID: retried.ID, From: store.JobPending, To: store.JobPending, Attempts: new(2)}))
	claimed := b.insert(t, "claimed")
	require.NoError(t, b.update(t, store.JobUpdate{ID: claimed.ID, From: store.JobPending, To: store.JobClaimed}))
	already := b.insert(t, "already")
	n, err := b.s.JobMarkEnqueued(t.Context(), []store.JobEnqueued{{ID: already.ID, StreamID: "1-1"}})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	n, err = b.s.JobMarkEnqueued(t.Context(), []store.JobEnqueued{
		{ID: match.ID, Attempts: 0, StreamID: "100-1"},
		{ID: retried.ID, Attempts: 1, StreamID: "100-2"},
		{ID: claimed.ID, Attempts: 0, StreamID: "100-3"},
		{ID: already.ID, Attempts: 0, StreamID: "100-4"},
		{ID: b.id("missing"), Attempts: 0, StreamID: "100-5"},
		{ID: match2.ID, Attempts: 0, StreamID: "100-6"},
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)

	check := func(id string, enqueued bool, streamID string) {
		t.Helper()
		j := b.get(t, id)
		require.Equal(t, enqueued, j.Enqueued, id)
		require.Equal(t, streamID, j.StreamID, id)
	}
	check(match.ID, true, "100-1")
	check(match2.ID, true, "100-6")
	check(retried.ID, false, "")
	check(claimed.ID, false, "")
	check(already.ID, true, "1-1")

	n, err = b.s.JobMarkEnqueued(t.Context(), nil)
	require.NoError(t, err)
	require.Zero(t, n)

	// Inside a transaction too.
	inTx := b.insert(t, "in-tx")
	require.NoError(t, b.s.WithTx(t.Context(), func(tx store.Tx) error {
		n, err := tx.JobMarkEnqueued(t.Context(), []store.JobEnqueued{{ID: inTx.ID, StreamID: "7-0"}})
		require.Equal(t, 1, n)
		return err
	}))
	check(inTx.ID, true, "7-0")

	// JobMarkPublished: the mark of a job inserted by the same transaction, which the MariaDB
	// driver sends with the COMMIT. It lands with the insert, and a rollback takes both back.
	published := b.params("published")
	require.NoError(t, b.s.WithTx(t.Context(), func(tx store.Tx) error {
		if _, _, err := tx.JobInsert(t.Context(), published); err != nil {
			return err
		}
		return tx.JobMarkPublished(t.Context(), []store.JobEnqueued{{ID: published.ID, StreamID: "8-0"}})
	}))
	check(published.ID, true, "8-0")
	rolledBack := b.params("published-rolled-back")
	errAbort := errors.New("abort")
	require.ErrorIs(t, b.s.WithTx(t.Context(), func(tx store.Tx) error {
		if _, _, err := tx.JobInsert(t.Context(), rolledBack); err != nil {
			return err
		}
		if err := tx.JobMarkPublished(t.Context(), []store.JobEnqueued{{ID: rolledBack.ID, StreamID: "9-0"}}); err != nil {
			return err
		}
		return errAbort
	}), errAbort)
	_, err = b.s.JobGet(t.Context(), rolledBack.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testSetWaiting: a waiting reason lands on pending jobs only, is cut to 255 bytes at a rune
// boundary, leaves updated_at alone, and a claim's update clears it.
func testSetWaiting(t *testing.T, b *bundle) {
	ctx := t.Context()
	pending, claimed := b.insert(t, "pending"), b.insert(t, "claimed")
	require.NoError(t, b.update(t, store.JobUpdate{ID: claimed.ID, From: store.JobPending, To: store.JobClaimed}))
	n, err := b.s.JobSetWaiting(ctx, []string{pending.ID, claimed.ID, b.id("missing")}, "no_capacity: full")
	require.NoError(t, err)
	require.Equal(t, 1, n, "the pending job only")
	got := b.get(t, pending.ID)
	require.Equal(t, "no_capacity: full", got.WaitingReason)
	requireTime(t, pending.UpdatedAt, got.UpdatedAt, "updated_at")
	require.Empty(t, b.get(t, claimed.ID).WaitingReason)

	long := strings.Repeat("é", 200) // 400 bytes
	_, err = b.s.JobSetWaiting(ctx, []string{pending.ID}, long)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("é", 127), b.get(t, pending.ID).WaitingReason, "255 bytes at most, whole runes")

	require.NoError(t, b.update(t, store.JobUpdate{ID: pending.ID, From: store.JobPending, To: store.JobClaimed,
		WaitingReason: new(string)}))
	require.Empty(t, b.get(t, pending.ID).WaitingReason)
}
