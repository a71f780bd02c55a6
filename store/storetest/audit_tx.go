package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

func testAuditInsertAndList(t *testing.T, b *bundle) {
	jobA, jobB := b.id("a"), b.id("b")
	ev := func(i int, job string, details string) store.AuditEvent {
		e := store.AuditEvent{
			TS: b.now.Add(time.Duration(i) * time.Second), EventType: fmt.Sprintf("job.e%d", i),
			JobID: job, LeaseToken: fmt.Sprintf("lease-%d", i), PoolID: "pool-1", Actor: "worker:w1",
		}
		if details != "" {
			e.Details = []byte(details)
		}
		return e
	}
	events := []store.AuditEvent{
		ev(0, jobA, `{"from":"pending", "to" : "claimed"}`),
		ev(1, jobB, ""),
		ev(2, jobA, ""),
		ev(3, "", `{"admin":true}`),
		ev(4, jobA, `[1,2]`),
		ev(5, jobB, `{}`),
	}
	require.NoError(t, b.s.AuditInsert(t.Context(), events))
	require.NoError(t, b.s.AuditInsert(t.Context(), nil))

	got, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: jobA})
	require.NoError(t, err)
	require.Len(t, got, 3)
	for i, want := range []store.AuditEvent{events[0], events[2], events[4]} {
		require.Positive(t, got[i].ID)
		if i > 0 {
			require.Greater(t, got[i].ID, got[i-1].ID, "ids increase")
		}
		requireTime(t, want.TS, got[i].TS)
		want.ID, want.TS = got[i].ID, got[i].TS
		require.Equal(t, want, got[i])
	}
	require.Nil(t, got[1].Details, "nil details read back as nil")

	// AfterID and Limit.
	after, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: jobA, AfterID: got[0].ID})
	require.NoError(t, err)
	require.Equal(t, []int64{got[1].ID, got[2].ID}, auditIDs(after))
	limited, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: jobA, Limit: 1, AfterID: got[0].ID})
	require.NoError(t, err)
	require.Equal(t, []int64{got[1].ID}, auditIDs(limited))
	none, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: jobA, AfterID: got[2].ID})
	require.NoError(t, err)
	require.Empty(t, none)

	gotB, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: jobB})
	require.NoError(t, err)
	require.Equal(t, []string{"job.e1", "job.e5"}, auditTypes(gotB))
	require.Equal(t, `{}`, string(gotB[1].Details))
}

func testAuditManyRows(t *testing.T, b *bundle) {
	job := b.id("many")
	const n = 1203 // more than one insert chunk and more than one page
	events := make([]store.AuditEvent, n)
	for i := range events {
		events[i] = store.AuditEvent{
			TS: b.now, EventType: fmt.Sprintf("e%04d", i), JobID: job, Actor: "leader",
			Details: fmt.Appendf(nil, `{"i":%d}`, i),
		}
	}
	require.NoError(t, b.s.AuditInsert(t.Context(), events))

	var all []store.AuditEvent
	var after int64
	for {
		page, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: job, AfterID: after, Limit: 500})
		require.NoError(t, err)
		all = append(all, page...)
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].ID
	}
	require.Len(t, all, n)
	for i, e := range all {
		require.Equal(t, fmt.Sprintf("e%04d", i), e.EventType, "insertion order is id order")
		if i > 0 {
			require.Greater(t, e.ID, all[i-1].ID)
		}
	}
	// Limit above the maximum is clamped (to 1000), never unbounded.
	page, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: job, Limit: 1_000_000})
	require.NoError(t, err)
	require.Len(t, page, 1000)
}

func testAuditUnfiltered(t *testing.T, b *bundle) {
	job := b.id("unfiltered")
	events := []store.AuditEvent{
		{TS: b.now, EventType: "x1", JobID: job},
		{TS: b.now, EventType: "x2"},
		{TS: b.now, EventType: "x3", JobID: job},
	}
	require.NoError(t, b.s.AuditInsert(t.Context(), events))
	mine, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: job})
	require.NoError(t, err)
	require.Len(t, mine, 2)

	// Without a job filter, rows of every job (and of none) come in id order. Other subtests
	// insert concurrently, so look only at our rows within the window.
	got, err := b.s.AuditList(t.Context(), store.AuditListParams{AfterID: mine[0].ID - 1, Limit: 1000})
	require.NoError(t, err)
	var ours []string
	for i, e := range got {
		if i > 0 {
			require.Greater(t, e.ID, got[i-1].ID)
		}
		if e.ID <= mine[1].ID && (e.JobID == job || e.EventType == "x2") {
			ours = append(ours, e.EventType)
		}
	}
	require.Equal(t, []string{"x1", "x2", "x3"}, ours)
}

func auditIDs(events []store.AuditEvent) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

func auditTypes(events []store.AuditEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.EventType
	}
	return out
}

func testTxCommit(t *testing.T, b *bundle) {
	id := b.id("commit")
	require.NoError(t, b.s.WithTx(t.Context(), func(tx store.Tx) error {
		_, inserted, err := tx.JobInsert(t.Context(), b.params("commit"))
		if err != nil {
			return err
		}
		require.True(t, inserted)
		// The transaction sees its own writes.
		j, err := tx.JobGet(t.Context(), id)
		if err != nil {
			return err
		}
		if err := tx.JobUpdate(t.Context(), store.JobUpdate{ID: id, From: j.Status, To: store.JobClaimed, Now: b.now}); err != nil {
			return err
		}
		return tx.AuditInsert(t.Context(), []store.AuditEvent{{TS: b.now, EventType: "job.submitted", JobID: id}})
	}))
	require.Equal(t, store.JobClaimed, b.get(t, id).Status)
	events, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: id})
	require.NoError(t, err)
	require.Len(t, events, 1)
}

func testTxRollbackOnError(t *testing.T, b *bundle) {
	id := b.id("rollback")
	existing := b.insert(t, "existing")
	errBoom := errors.New("boom")
	err := b.s.WithTx(t.Context(), func(tx store.Tx) error {
		if _, _, err := tx.JobInsert(t.Context(), b.params("rollback")); err != nil {
			return err
		}
		if err := tx.JobUpdate(t.Context(), store.JobUpdate{ID: existing.ID, From: store.JobPending, To: store.JobCancelled, Now: b.now}); err != nil {
			return err
		}
		if err := tx.AuditInsert(t.Context(), []store.AuditEvent{{TS: b.now, EventType: "job.submitted", JobID: id}}); err != nil {
			return err
		}
		return fmt.Errorf("later step: %w", errBoom)
	})
	require.ErrorIs(t, err, errBoom)
	requireRolledBack(t, b, id)
	require.Equal(t, store.JobPending, b.get(t, existing.ID).Status)
}

func testTxRollbackOnPanic(t *testing.T, b *bundle) {
	id := b.id("panic")
	require.PanicsWithValue(t, "kaboom", func() {
		_ = b.s.WithTx(t.Context(), func(tx store.Tx) error {
			if _, _, err := tx.JobInsert(t.Context(), b.params("panic")); err != nil {
				return err
			}
			if err := tx.AuditInsert(t.Context(), []store.AuditEvent{{TS: b.now, EventType: "job.submitted", JobID: id}}); err != nil {
				return err
			}
			panic("kaboom")
		})
	})
	requireRolledBack(t, b, id)
	// The store is still usable: the connection went back to the pool in a clean state.
	b.insert(t, "after-panic")
}

// testTxDeferChecks covers store.Tx.DeferChecks: compare-and-set writes whose check may wait
// for the next statement still fail the transaction as a whole when they do not match, and
// commit when they do (identical values included).
func testTxDeferChecks(t *testing.T, b *bundle) {
	ctx := t.Context()
	a, c := b.insert(t, "defer-a"), b.insert(t, "defer-c")
	l := b.lease("defer-l", nil, 0)
	require.NoError(t, b.s.LeaseInsert(ctx, []store.Lease{l}))
	at := b.now.Add(time.Second)
	locked := func(tx store.Tx, ids ...string) {
		_, err := tx.JobGetMany(ctx, ids, true)
		require.NoError(t, err)
		_, err = tx.LeaseGetMany(ctx, []string{l.Token}, true)
		require.NoError(t, err)
		tx.DeferChecks()
	}
	// both moves a and c in one batch.
	both := func(tx store.Tx, fromA, fromC, to store.JobStatus) error {
		return tx.JobUpdateMany(ctx, []store.JobUpdate{
			{ID: a.ID, From: fromA, To: to, Now: at},
			{ID: c.ID, From: fromC, To: to, Now: at},
		})
	}

	t.Run("Match", func(t *testing.T) {
		require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error {
			locked(tx, a.ID, c.ID)
			if err := both(tx, store.JobPending, store.JobPending, store.JobClaimed); err != nil {
				return err
			}
			// The same values again: matched, not changed, which counts.
			if err := tx.JobUpdate(ctx, store.JobUpdate{ID: a.ID, From: store.JobClaimed, To: store.JobClaimed, Now: at}); err != nil {
				return err
			}
			// A read after the writes sees them.
			got, err := tx.JobGet(ctx, c.ID)
			if err != nil {
				return err
			}
			require.Equal(t, store.JobClaimed, got.Status)
			return tx.LeaseSetStatus(ctx, store.LeaseStatusUpdate{Token: l.Token, From: store.LeaseActive, To: store.LeaseReleased, Now: at})
		}))
		require.Equal(t, store.JobClaimed, b.get(t, a.ID).Status)
		require.Equal(t, store.JobClaimed, b.get(t, c.ID).Status)
		got, err := b.s.LeaseGet(ctx, l.Token, false)
		require.NoError(t, err)
		require.Equal(t, store.LeaseReleased, got.Status)
	})

	// Each way a mismatch can surface: with the commit, with a later write, with a later read.
	for _, then := range []string{"commit", "write", "read"} {
		t.Run("MismatchFailsAtThe"+then, func(t *testing.T) {
			fresh := b.insert(t, "defer-fresh-"+then)
			err := b.s.WithTx(ctx, func(tx store.Tx) error {
				locked(tx, a.ID, c.ID, fresh.ID)
				if err := tx.JobUpdate(ctx, store.JobUpdate{ID: fresh.ID, From: store.JobPending, To: store.JobClaimed, Now: at}); err != nil {
					return err
				}
				// a is claimed, not pending: this batch cannot match all its rows.
				if err := both(tx, store.JobPending, store.JobClaimed, store.JobRunning); err != nil {
					return err
				}
				switch then {
				case "write":
					return tx.JobUpdate(ctx, store.JobUpdate{ID: c.ID, From: store.JobRunning, To: store.JobDone, Now: at})
				case "read":
					_, err := tx.JobGet(ctx, fresh.ID)
					return err
				}
				return nil
			})
			require.ErrorIs(t, err, store.ErrConflict)
			for _, j := range []store.Job{a, c} {
				require.Equal(t, store.JobClaimed, b.get(t, j.ID).Status, "rolled back")
			}
			require.Equal(t, store.JobPending, b.get(t, fresh.ID).Status, "the write before it rolled back too")
		})
	}
}

func requireRolledBack(t *testing.T, b *bundle, id string) {
	t.Helper()
	_, err := b.s.JobGet(t.Context(), id)
	require.ErrorIs(t, err, store.ErrNotFound)
	events, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: id})
	require.NoError(t, err)
	require.Empty(t, events)
}

func testConcurrentCAS(t *testing.T, b *bundle) {
	j := b.insert(t, "contended")
	const n = 20
	var (
		wg   sync.WaitGroup
		errs [n]error
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = b.s.WithTx(t.Context(), func(tx store.Tx) error {
				if err := tx.JobUpdate(t.Context(), store.JobUpdate{
					ID: j.ID, From: store.JobPending, ExpectAttempts: new(0), To: store.JobClaimed,
					Attempts: new(1), WorkerID: new(fmt.Sprintf("w%d", i)), Now: b.now.Add(time.Second),
				}); err != nil {
					return err
				}
				return tx.AuditInsert(t.Context(), []store.AuditEvent{{TS: b.now, EventType: "job.pending->claimed", JobID: j.ID, Actor: fmt.Sprintf("worker:w%d", i)}})
			})
		})
	}
	close(start)
	wg.Wait()

	winners := 0
	var winner int
	for i, err := range errs {
		if err == nil {
			winners++
			winner = i
			continue
		}
		require.ErrorIs(t, err, store.ErrConflict, "goroutine %d", i)
	}
	require.Equal(t, 1, winners)
	got := b.get(t, j.ID)
	require.Equal(t, store.JobClaimed, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, fmt.Sprintf("w%d", winner), got.WorkerID)
	events, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: j.ID})
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, fmt.Sprintf("worker:w%d", winner), events[0].Actor)
}
