package leader_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/store"
)

func TestFencing(t *testing.T) {
	t.Parallel()

	t.Run("StaleLeaderIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A slow elector: after its renewal is fenced it waits two intervals before it takes a
		// newer term, which leaves the test ample time with term B current.
		a, rec := b.newMySQL(t, "a", 300*time.Millisecond)
		require.NoError(t, a.Start(t.Context()))
		termA := rec.next(t).term

		// A second leader takes term B while a still believes it leads (as a leader frozen
		// past its lock would).
		termB, err := b.st.LeaderAcquire(t.Context(), "b", time.Now())
		require.NoError(t, err)
		require.Equal(t, termA+1, termB)

		write := func(term int64, what string) error {
			return leader.RunFenced(t.Context(), b.st, term, func(tx store.Tx) error {
				return tx.AuditInsert(t.Context(), []store.AuditEvent{{TS: time.Now(), EventType: what, Actor: "test"}})
			})
		}
		err = write(termA, "write.a")
		require.ErrorIs(t, err, store.ErrFenced)
		require.ErrorContains(t, err, "check leadership term 1 (current 2)")
		require.NoError(t, write(termB, "write.b"))

		var types []string
		for _, ev := range b.auditEvents(t) {
			types = append(types, ev.EventType)
		}
		require.Contains(t, types, "write.b")
		require.NotContains(t, types, "write.a", "the stale leader's write did not commit")
	})

	t.Run("AcquireWaitsForFencedTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		termA, err := b.st.LeaderAcquire(t.Context(), "a", time.Now())
		require.NoError(t, err)

		// A fenced transaction of term A passes its check and stays open.
		held, release := make(chan struct{}), make(chan struct{})
		txDone := make(chan error, 1)
		go func() {
			txDone <- leader.RunFenced(t.Context(), b.st, termA, func(tx store.Tx) error {
				close(held)
				<-release
				return tx.AuditInsert(t.Context(), []store.AuditEvent{{TS: time.Now(), EventType: "write.a", Actor: "test"}})
			})
		}()
		requireClosed(t, held, "the fenced transaction started")

		// A new leader's acquisition queues behind the shared lock.
		acquired := make(chan int64, 1)
		go func() {
			term, err := b.st.LeaderAcquire(t.Context(), "b", time.Now())
			if err != nil {
				t.Error(err)
			}
			acquired <- term
		}()
		// InnoDB refreshes INNODB_TRX only when nobody read it for 100 ms: poll slower.
		require.Eventually(t, func() bool { return b.lockWaits(t) == 1 }, waitMax, 150*time.Millisecond,
			"the acquisition waits for the row lock")
		select {
		case term := <-acquired:
			t.Fatalf("acquired term %d while a fenced transaction of term %d was open", term, termA)
		default:
		}

		// The fenced transaction commits under term A; only then is term B acquired.
		close(release)
		select {
		case err := <-txDone:
			require.NoError(t, err)
		case <-time.After(waitMax):
			t.Fatal("the fenced transaction did not finish")
		}
		select {
		case term := <-acquired:
			require.Equal(t, termA+1, term)
		case <-time.After(waitMax):
			t.Fatal("the acquisition did not finish")
		}
		events := b.auditEvents(t)
		require.Len(t, events, 1)
		require.Equal(t, "write.a", events[0].EventType)
		require.ErrorIs(t, leader.RunFenced(t.Context(), b.st, termA, func(store.Tx) error {
			return errors.New("must not run")
		}), store.ErrFenced)
	})
}

// lockWaits counts the transactions of the test's database that wait for a row lock.
func (b *bundle) lockWaits(t *testing.T) int {
	t.Helper()
	var n int
	err := b.raw.QueryRowContext(t.Context(), `SELECT COUNT(*)
		FROM information_schema.INNODB_TRX t
		JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
		WHERE p.DB = ? AND t.trx_state = 'LOCK WAIT'`, b.dbName).Scan(&n)
	require.NoError(t, err)
	return n
}
