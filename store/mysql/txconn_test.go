package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/mysql"
)

// TestTxFolding covers the transactions that send START TRANSACTION and their blind writes
// (audit rows, leases) together with the next statement (txconn.go).
func TestTxFolding(t *testing.T) {
	t.Parallel()
	// One connection: every transaction reuses the one the previous left behind, so a
	// transaction left open on it would show.
	s, dsn := setup(t, mysql.Options{MaxOpenConns: 1, MaxIdleConns: 1})
	raw, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { raw.Close() })
	auditRows := func(t *testing.T, jobID string) int {
		t.Helper()
		var n int
		require.NoError(t, raw.QueryRowContext(t.Context(),
			"SELECT COUNT(*) FROM orchestrator_audit WHERE job_id = ?", jobID).Scan(&n))
		return n
	}
	event := func(jobID, details string) store.AuditEvent {
		return store.AuditEvent{TS: time.Now(), EventType: "test", JobID: jobID, Details: []byte(details)}
	}
	// broken is an audit row MariaDB refuses: its event type is longer than the column.
	broken := func(jobID string) store.AuditEvent {
		return store.AuditEvent{TS: time.Now(), EventType: strings.Repeat("x", 65), JobID: jobID}
	}

	// dirtyReader is another session that reads uncommitted rows: it sees a write as soon as a
	// statement carried it to the server.
	dirtyReader := func(t *testing.T) *sql.Conn {
		t.Helper()
		dirty, err := raw.Conn(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { dirty.Close() })
		_, err = dirty.ExecContext(t.Context(), "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
		require.NoError(t, err)
		return dirty
	}

	t.Run("HeldUntilNextStatement", func(t *testing.T) {
		// Another session reading uncommitted rows sees the audit row only once a statement
		// carried it to the server, and the job row with it.
		dirty := dirtyReader(t)
		seen := func(jobID string) int {
			var n int
			require.NoError(t, dirty.QueryRowContext(t.Context(),
				"SELECT COUNT(*) FROM orchestrator_audit WHERE job_id = ?", jobID).Scan(&n))
			return n
		}
		err = s.WithTx(t.Context(), func(tx store.Tx) error {
			if err := tx.AuditInsert(t.Context(), []store.AuditEvent{event("held", `{"n":1}`)}); err != nil {
				return err
			}
			require.Zero(t, seen("held"), "held, not sent")
			insertJob(t, tx, "held")
			require.Equal(t, 1, seen("held"), "sent with the insert")
			return tx.AuditInsert(t.Context(), []store.AuditEvent{event("held", `{"n":2}`)})
		})
		require.NoError(t, err)
		require.Equal(t, 2, auditRows(t, "held"), "the last held write went with COMMIT")
	})

	t.Run("DeferredCompareAndSet", func(t *testing.T) {
		// After DeferChecks a compare-and-set write waits for the next statement like a blind
		// one; without it, it goes at once.
		dirty := dirtyReader(t)
		status := func(jobID string) store.JobStatus {
			var st string
			require.NoError(t, dirty.QueryRowContext(t.Context(),
				"SELECT status FROM orchestrator_jobs WHERE job_id = ?", jobID).Scan(&st))
			return store.JobStatus(st)
		}
		insertJob(t, s, "deferred")
		err = s.WithTx(t.Context(), func(tx store.Tx) error {
			if _, err := tx.JobGetMany(t.Context(), []string{"deferred"}, true); err != nil {
				return err
			}
			if err := tx.JobUpdate(t.Context(), store.JobUpdate{ID: "deferred", From: store.JobPending, To: store.JobClaimed, Now: time.Now()}); err != nil {
				return err
			}
			require.Equal(t, store.JobClaimed, status("deferred"), "not deferred: sent at once")
			tx.DeferChecks()
			if err := tx.JobUpdate(t.Context(), store.JobUpdate{ID: "deferred", From: store.JobClaimed, To: store.JobRunning, Now: time.Now()}); err != nil {
				return err
			}
			require.Equal(t, store.JobClaimed, status("deferred"), "deferred: held")
			return tx.AuditInsert(t.Context(), []store.AuditEvent{event("deferred", `{}`)})
		})
		require.NoError(t, err)
		require.Equal(t, store.JobRunning, status("deferred"), "sent with COMMIT")

		// A mismatch names the write, and is a conflict.
		err = s.WithTx(t.Context(), func(tx store.Tx) error {
			tx.DeferChecks()
			return tx.JobUpdate(t.Context(), store.JobUpdate{ID: "deferred", From: store.JobPending, To: store.JobClaimed, Now: time.Now()})
		})
		require.ErrorIs(t, err, store.ErrConflict)
		require.ErrorContains(t, err, "update job deferred from pending to claimed: 0 of 1 rows still matched")
		require.Equal(t, store.JobRunning, status("deferred"))
	})

	t.Run("OnlyHeldWrites", func(t *testing.T) {
		err := s.WithTx(t.Context(), func(tx store.Tx) error {
			return tx.AuditInsert(t.Context(), []store.AuditEvent{event("only-held", `{}`)})
		})
		require.NoError(t, err)
		require.Equal(t, 1, auditRows(t, "only-held"))
	})

	t.Run("HeldWriteFailsNextStatement", func(t *testing.T) {
		// The audit row is refused: the statement it goes out with fails, names it, and
		// nothing of the transaction stays.
		err := s.WithTx(t.Context(), func(tx store.Tx) error {
			insertJob(t, tx, "fails-next")
			if err := tx.AuditInsert(t.Context(), []store.AuditEvent{broken("fails-next")}); err != nil {
				return err
			}
			_, err := tx.JobGet(t.Context(), "fails-next")
			return err
		})
		require.ErrorContains(t, err, "insert audit events")
		_, err = s.JobGet(t.Context(), "fails-next")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, auditRows(t, "fails-next"))
	})

	t.Run("HeldWriteFailsCommit", func(t *testing.T) {
		err := s.WithTx(t.Context(), func(tx store.Tx) error {
			insertJob(t, tx, "fails-commit")
			return tx.AuditInsert(t.Context(), []store.AuditEvent{broken("fails-commit")})
		})
		require.ErrorContains(t, err, "commit transaction")
		require.ErrorContains(t, err, "insert audit events")
		_, err = s.JobGet(t.Context(), "fails-commit")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("HeldLeaseConflictIsConflict", func(t *testing.T) {
		now := time.Now()
		l := store.Lease{Token: "lt_fold_dup", Agent: "a", NodeID: "n", Mode: store.LeaseCPU, TTL: time.Minute,
			Status: store.LeaseActive, CreatedAt: now, ExpiresAt: now.Add(time.Minute), LastHeartbeat: now}
		require.NoError(t, s.LeaseInsert(t.Context(), []store.Lease{l}))
		err := s.WithTx(t.Context(), func(tx store.Tx) error {
			return tx.LeaseInsert(t.Context(), []store.Lease{l})
		})
		require.ErrorIs(t, err, store.ErrConflict)
	})

	t.Run("LargeStatementGoesAlone", func(t *testing.T) {
		// Over the fold limit the held writes go first, on their own; both land.
		payload := []byte(`{"blob":"` + strings.Repeat("x", 2<<20) + `"}`)
		err := s.WithTx(t.Context(), func(tx store.Tx) error {
			if err := tx.AuditInsert(t.Context(), []store.AuditEvent{event("large", `{}`)}); err != nil {
				return err
			}
			_, _, err := tx.JobInsert(t.Context(), store.JobInsertParams{ID: "large", Type: "noop", Agent: "a",
				Payload: payload, MaxAttempts: 1, Now: time.Now()})
			return err
		})
		require.NoError(t, err)
		got, err := s.JobGet(t.Context(), "large")
		require.NoError(t, err)
		require.Len(t, got.Payload, len(payload))
		require.Equal(t, 1, auditRows(t, "large"))
	})

	t.Run("NoStatements", func(t *testing.T) {
		require.NoError(t, s.WithTx(t.Context(), func(store.Tx) error { return nil }))
	})

	t.Run("ConnectionLeftClean", func(t *testing.T) {
		// After the failures above, the pool's one connection is in no transaction: a write
		// outside WithTx is visible to another session at once.
		insertJob(t, s, "clean")
		var n int
		require.NoError(t, raw.QueryRowContext(t.Context(),
			"SELECT COUNT(*) FROM orchestrator_jobs WHERE job_id = 'clean'").Scan(&n))
		require.Equal(t, 1, n)
	})

	t.Run("CancelledMidTransaction", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		err := s.WithTx(ctx, func(tx store.Tx) error {
			insertJob(t, tx, "cancelled")
			cancel()
			_, err := tx.JobGet(ctx, "cancelled")
			return err
		})
		require.ErrorIs(t, err, context.Canceled)
		_, err = s.JobGet(t.Context(), "cancelled")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
