package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// The batch writes of the hot path: many jobs in one INSERT, many compare-and-sets in few
// UPDATEs.

func testInsertMany(t *testing.T, b *bundle) {
	ps := make([]store.JobInsertParams, 3)
	for i := range ps {
		ps[i] = b.params(fmt.Sprintf("many%d", i))
		ps[i].Payload = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
		ps[i].GPUMemoryMB = 1024 * i
		ps[i].GPUs = i
	}
	ps[2].AvailableAt = b.now.Add(time.Minute)
	jobs, err := b.s.JobInsertMany(t.Context(), ps)
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	for i, j := range jobs {
		require.Equal(t, ps[i].ID, j.ID)
		requireSameJob(t, j, b.get(t, ps[i].ID))
		require.Equal(t, string(ps[i].Payload), string(b.get(t, ps[i].ID).Payload))
	}
	requireTime(t, b.now.Add(time.Minute), b.get(t, ps[2].ID).AvailableAt, "available_at")

	// A taken id fails the whole insert; inside a transaction nothing of it lands.
	fresh := b.params("fresh")
	err = b.s.WithTx(t.Context(), func(tx store.Tx) error {
		_, err := tx.JobInsertMany(t.Context(), []store.JobInsertParams{fresh, ps[1]})
		return err
	})
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = b.s.JobGet(t.Context(), fresh.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the free id of a conflicting batch must not be inserted")

	// A driver may hold the INSERT for the transaction's next statement: a read in the same
	// transaction sees the rows.
	held := b.params("held")
	err = b.s.WithTx(t.Context(), func(tx store.Tx) error {
		if _, err := tx.JobInsertMany(t.Context(), []store.JobInsertParams{held}); err != nil {
			return err
		}
		got, err := tx.JobGet(t.Context(), held.ID)
		require.NoError(t, err)
		require.Equal(t, store.JobPending, got.Status)
		return nil
	})
	require.NoError(t, err)

	// Flush sends what the driver holds: a taken id fails it, not the commit.
	err = b.s.WithTx(t.Context(), func(tx store.Tx) error {
		if _, err := tx.JobInsertMany(t.Context(), []store.JobInsertParams{ps[0]}); err != nil {
			return err
		}
		err := tx.Flush(t.Context())
		require.ErrorIs(t, err, store.ErrConflict, "the held insert went out with Flush")
		return err
	})
	require.ErrorIs(t, err, store.ErrConflict)

	// The same id twice in one batch is a conflict too.
	_, err = b.s.JobInsertMany(t.Context(), []store.JobInsertParams{fresh, fresh})
	require.ErrorIs(t, err, store.ErrConflict)
}

func testUpdateMany(t *testing.T, b *bundle) {
	ctx := t.Context()
	var ids []string
	for i := range 4 {
		ids = append(ids, b.insert(t, fmt.Sprintf("um%d", i)).ID)
	}
	at := b.now.Add(3 * time.Second)
	// Two shapes: three claims with per-job attempts and tokens, one cancel.
	us := []store.JobUpdate{
		{ID: ids[2], From: store.JobPending, To: store.JobClaimed, Attempts: new(3), WorkerID: new("w"), LeaseToken: new("t2"), StreamID: new("1-2"), Now: at},
		{ID: ids[0], From: store.JobPending, To: store.JobClaimed, Attempts: new(1), WorkerID: new("w"), LeaseToken: new("t0"), StreamID: new("1-0"), Now: at},
		{ID: ids[3], From: store.JobPending, To: store.JobCancelled, FinishedAt: &at, Now: at},
		{ID: ids[1], From: store.JobPending, To: store.JobClaimed, Attempts: new(2), WorkerID: new("w"), LeaseToken: new("t1"), StreamID: new("1-1"), Now: at},
	}
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error { return tx.JobUpdateMany(ctx, us) }))
	for i := range 3 {
		got := b.get(t, ids[i])
		require.Equal(t, store.JobClaimed, got.Status)
		require.Equal(t, i+1, got.Attempts)
		require.Equal(t, fmt.Sprintf("t%d", i), got.LeaseToken)
		require.Equal(t, fmt.Sprintf("1-%d", i), got.StreamID)
		require.Equal(t, "w", got.WorkerID)
		requireTime(t, at, got.UpdatedAt, "updated_at")
	}
	got := b.get(t, ids[3])
	require.Equal(t, store.JobCancelled, got.Status)
	requireTimePtr(t, &at, got.FinishedAt, "finished_at")

	// Per-row guards: one job whose attempts moved on fails the whole call, and the
	// transaction rolls the others back.
	done := b.now.Add(5 * time.Second)
	next := []store.JobUpdate{
		{ID: ids[0], From: store.JobClaimed, ExpectAttempts: new(1), To: store.JobRunning, StartedAt: &done, Now: done},
		{ID: ids[1], From: store.JobClaimed, ExpectAttempts: new(9), To: store.JobRunning, StartedAt: &done, Now: done},
	}
	err := b.s.WithTx(ctx, func(tx store.Tx) error { return tx.JobUpdateMany(ctx, next) })
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, store.JobClaimed, b.get(t, ids[0]).Status, "rolled back with the failed batch")

	next[1].ExpectAttempts = new(2)
	require.NoError(t, b.s.JobUpdateMany(ctx, next))
	for _, id := range ids[:2] {
		got := b.get(t, id)
		require.Equal(t, store.JobRunning, got.Status)
		requireTimePtr(t, &done, got.StartedAt, "started_at")
	}

	// The same job twice is refused before anything is written.
	err = b.s.JobUpdateMany(ctx, []store.JobUpdate{
		{ID: ids[2], From: store.JobClaimed, To: store.JobRunning, Now: done},
		{ID: ids[2], From: store.JobClaimed, To: store.JobRunning, Now: done},
	})
	require.Error(t, err)
	require.Equal(t, store.JobClaimed, b.get(t, ids[2]).Status)

	// One write keeps JobUpdate's precise errors.
	err = b.s.JobUpdateMany(ctx, []store.JobUpdate{{ID: b.id("missing"), From: store.JobPending, To: store.JobClaimed, Now: done}})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testLeaseSetStatusMany(t *testing.T, b *bundle) {
	ctx := t.Context()
	ls := []store.Lease{b.lease("m1", nil, 0), b.lease("m2", nil, 0), b.lease("m3", nil, 0)}
	require.NoError(t, b.s.LeaseInsert(ctx, ls))
	end := b.now.Add(7 * time.Second)
	require.NoError(t, b.s.LeaseSetStatusMany(ctx, []store.LeaseStatusUpdate{
		{Token: ls[0].Token, From: store.LeaseActive, To: store.LeaseReleased, Now: end},
		{Token: ls[1].Token, From: store.LeaseActive, To: store.LeaseExpired, Now: end},
	}))
	for i, want := range []store.LeaseStatus{store.LeaseReleased, store.LeaseExpired, store.LeaseActive} {
		got, err := b.s.LeaseGet(ctx, ls[i].Token, false)
		require.NoError(t, err)
		require.Equal(t, want, got.Status)
		if want != store.LeaseActive {
			requireTimePtr(t, &end, got.EndedAt, "ended_at")
		} else {
			require.Nil(t, got.EndedAt)
		}
	}
	// A lease that moved on fails the call.
	err := b.s.WithTx(ctx, func(tx store.Tx) error {
		return tx.LeaseSetStatusMany(ctx, []store.LeaseStatusUpdate{
			{Token: ls[2].Token, From: store.LeaseActive, To: store.LeaseReleased, Now: end},
			{Token: ls[0].Token, From: store.LeaseActive, To: store.LeaseReleased, Now: end},
		})
	})
	require.ErrorIs(t, err, store.ErrConflict)
	got, err := b.s.LeaseGet(ctx, ls[2].Token, false)
	require.NoError(t, err)
	require.Equal(t, store.LeaseActive, got.Status, "rolled back with the failed batch")
}

// testLockJobsAndLeases covers store.Tx.LockJobsAndLeases: the existing jobs and leases among
// those asked for, whichever of the two lists is empty, with the payloads asked for only.
func testLockJobsAndLeases(t *testing.T, b *bundle) {
	ctx := t.Context()
	j1, j2 := b.insert(t, "lock-1"), b.insert(t, "lock-2")
	require.NotEmpty(t, j1.Payload)
	ls := []store.Lease{b.lease("lock-a", nil, 0), b.lease("lock-b", nil, 0)}
	require.NoError(t, b.s.LeaseInsert(ctx, ls))
	tokens := func(got []store.Lease) []string {
		out := make([]string, len(got))
		for i, l := range got {
			out[i] = l.Token
		}
		return out
	}
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error {
		byID := func(jobs []store.Job, id string) store.Job {
			return jobs[slices.IndexFunc(jobs, func(j store.Job) bool { return j.ID == id })]
		}
		jobs, leases, err := tx.LockJobsAndLeases(ctx, store.LockParams{
			Jobs:     []string{j2.ID, b.id("lock-missing"), j1.ID, j2.ID},
			Payloads: []string{j1.ID, b.id("lock-missing")},
			Leases:   []string{ls[1].Token, "", "lt_missing", ls[0].Token},
		})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{j1.ID, j2.ID}, ids(jobs))
		require.ElementsMatch(t, []string{ls[0].Token, ls[1].Token}, tokens(leases))
		requireSameJob(t, j1, byID(jobs, j1.ID))
		require.Nil(t, byID(jobs, j2.ID).Payload, "a payload not asked for is not read")
		j2.Payload = nil
		requireSameJob(t, j2, byID(jobs, j2.ID))

		jobs, leases, err = tx.LockJobsAndLeases(ctx, store.LockParams{Jobs: []string{j1.ID, j2.ID}, Payloads: []string{j2.ID, j1.ID}})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{j1.ID, j2.ID}, ids(jobs))
		require.JSONEq(t, string(j1.Payload), string(byID(jobs, j1.ID).Payload))
		require.NotEmpty(t, byID(jobs, j2.ID).Payload)
		require.Empty(t, leases)

		jobs, _, err = tx.LockJobsAndLeases(ctx, store.LockParams{Jobs: []string{j1.ID}})
		require.NoError(t, err)
		require.Equal(t, []string{j1.ID}, ids(jobs))
		require.Nil(t, jobs[0].Payload)

		jobs, leases, err = tx.LockJobsAndLeases(ctx, store.LockParams{Leases: []string{ls[0].Token}})
		require.NoError(t, err)
		require.Empty(t, jobs)
		require.Equal(t, []string{ls[0].Token}, tokens(leases))
		return nil
	}))
}
