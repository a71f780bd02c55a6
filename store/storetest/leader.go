package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testLeader runs the leader_state subtests one after the other: the table has a single row
// that every one of them changes, so unlike the job subtests they cannot share it in parallel.
// Assertions are relative to the term each subtest starts from.
func testLeader(t *testing.T, b *bundle) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *bundle)
	}{
		{"Initial", testLeaderInitial},
		{"AcquireIncrements", testLeaderAcquireIncrements},
		{"AcquireRolledBack", testLeaderAcquireRolledBack},
		{"Touch", testLeaderTouch},
		{"CheckTerm", testLeaderCheckTerm},
		{"FencedTxRollsBack", testLeaderFencedTxRollsBack},
		{"ConcurrentAcquire", testLeaderConcurrentAcquire},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

// leaderGet reads leader_state, requiring success.
func (b *bundle) leaderGet(t *testing.T) store.LeaderState {
	t.Helper()
	ls, err := b.s.LeaderGet(t.Context())
	require.NoError(t, err)
	return ls
}

func testLeaderInitial(t *testing.T, b *bundle) {
	// A freshly migrated database has the row, with no leader yet.
	ls := b.leaderGet(t)
	require.Equal(t, store.LeaderState{}, ls)
}

func testLeaderAcquireIncrements(t *testing.T, b *bundle) {
	before := b.leaderGet(t).Term

	t1, err := b.s.LeaderAcquire(t.Context(), b.prefix+"a", b.now)
	require.NoError(t, err)
	require.Equal(t, before+1, t1)
	ls := b.leaderGet(t)
	require.Equal(t, t1, ls.Term)
	require.Equal(t, b.prefix+"a", ls.LeaderID)
	requireTime(t, b.now, ls.AcquiredAt, "acquired_at")
	requireTime(t, b.now, ls.RenewedAt, "renewed_at starts at acquired_at")

	later := b.now.Add(time.Minute)
	t2, err := b.s.LeaderAcquire(t.Context(), b.prefix+"b", later)
	require.NoError(t, err)
	require.Equal(t, t1+1, t2)
	ls = b.leaderGet(t)
	require.Equal(t, store.LeaderState{Term: t2, LeaderID: b.prefix + "b", AcquiredAt: ls.AcquiredAt, RenewedAt: ls.RenewedAt}, ls)
	requireTime(t, later, ls.AcquiredAt, "acquired_at")
	requireTime(t, later, ls.RenewedAt, "renewed_at")
}

func testLeaderAcquireRolledBack(t *testing.T, b *bundle) {
	before := b.leaderGet(t)
	errRollback := errors.New("roll back")
	err := b.s.WithTx(t.Context(), func(tx store.Tx) error {
		term, err := tx.LeaderAcquire(t.Context(), b.prefix+"tx", b.now.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, before.Term+1, term)
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)
	require.Equal(t, before, b.leaderGet(t), "a rolled-back acquisition leaves no trace")
}

func testLeaderTouch(t *testing.T, b *bundle) {
	term, err := b.s.LeaderAcquire(t.Context(), b.prefix+"toucher", b.now)
	require.NoError(t, err)

	renewed := b.now.Add(3 * time.Second)
	require.NoError(t, b.s.LeaderTouch(t.Context(), term, renewed))
	ls := b.leaderGet(t)
	requireTime(t, b.now, ls.AcquiredAt, "acquired_at unchanged")
	requireTime(t, renewed, ls.RenewedAt, "renewed_at")
	require.NoError(t, b.s.LeaderTouch(t.Context(), term, renewed), "an unchanged renewed_at is no conflict")

	for _, stale := range []int64{term - 1, term + 1, 0} {
		err := b.s.LeaderTouch(t.Context(), stale, renewed.Add(time.Hour))
		require.ErrorIs(t, err, store.ErrFenced, "term %d", stale)
	}
	requireTime(t, renewed, b.leaderGet(t).RenewedAt, "a fenced touch writes nothing")

	// A new acquisition fences the old term.
	next, err := b.s.LeaderAcquire(t.Context(), b.prefix+"next", b.now.Add(time.Minute))
	require.NoError(t, err)
	require.ErrorIs(t, b.s.LeaderTouch(t.Context(), term, b.now.Add(2*time.Minute)), store.ErrFenced)
	require.NoError(t, b.s.LeaderTouch(t.Context(), next, b.now.Add(2*time.Minute)))
}

func testLeaderCheckTerm(t *testing.T, b *bundle) {
	old, err := b.s.LeaderAcquire(t.Context(), b.prefix+"old", b.now)
	require.NoError(t, err)
	check := func(term int64) error {
		return b.s.WithTx(t.Context(), func(tx store.Tx) error {
			return tx.LeaderCheckTerm(t.Context(), term)
		})
	}
	require.NoError(t, check(old))

	current, err := b.s.LeaderAcquire(t.Context(), b.prefix+"new", b.now)
	require.NoError(t, err)
	require.ErrorIs(t, check(old), store.ErrFenced)
	require.ErrorIs(t, check(current+1), store.ErrFenced, "a term from the future is not current either")
	require.NoError(t, check(current))
	require.NoError(t, b.s.LeaderCheckTerm(t.Context(), current), "also answers outside a transaction")
	require.ErrorIs(t, b.s.LeaderCheckTerm(t.Context(), old), store.ErrFenced)
}

func testLeaderFencedTxRollsBack(t *testing.T, b *bundle) {
	old, err := b.s.LeaderAcquire(t.Context(), b.prefix+"old", b.now)
	require.NoError(t, err)
	current, err := b.s.LeaderAcquire(t.Context(), b.prefix+"new", b.now)
	require.NoError(t, err)

	// A leader-only write: a job update and its audit row, fenced by the term.
	j := b.insert(t, "fenced")
	write := func(term int64, attempts int) error {
		return b.s.WithTx(t.Context(), func(tx store.Tx) error {
			if err := tx.LeaderCheckTerm(t.Context(), term); err != nil {
				return err
			}
			if err := tx.JobUpdate(t.Context(), store.JobUpdate{ID: j.ID, From: store.JobPending,
				To: store.JobPending, Attempts: &attempts, Now: b.now.Add(time.Second)}); err != nil {
				return err
			}
			return tx.AuditInsert(t.Context(), []store.AuditEvent{{TS: b.now, EventType: "job.touched",
				JobID: j.ID, Actor: "leader"}})
		})
	}
	require.ErrorIs(t, write(old, 1), store.ErrFenced)
	require.Zero(t, b.get(t, j.ID).Attempts, "the stale leader wrote nothing")
	events, err := b.s.AuditList(t.Context(), store.AuditListParams{JobID: j.ID})
	require.NoError(t, err)
	require.Empty(t, events)

	require.NoError(t, write(current, 2))
	require.Equal(t, 2, b.get(t, j.ID).Attempts)
}

func testLeaderConcurrentAcquire(t *testing.T, b *bundle) {
	before := b.leaderGet(t).Term
	const n = 8
	var (
		wg    sync.WaitGroup
		terms [n]int64
		errs  [n]error
	)
	for i := range n {
		wg.Go(func() {
			terms[i], errs[i] = b.s.LeaderAcquire(t.Context(), b.prefix+"racer", b.now)
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for i := range n {
		require.NoError(t, errs[i])
		require.False(t, seen[terms[i]], "term %d handed out twice", terms[i])
		require.Greater(t, terms[i], before)
		require.LessOrEqual(t, terms[i], before+n)
		seen[terms[i]] = true
	}
	require.Equal(t, before+n, b.leaderGet(t).Term)
}
