package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sqlitedrv "modernc.org/sqlite"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := setup(t, sqlite.Options{})
		return s
	})
}

// setup migrates a fresh database file in a temporary directory and opens a store on it; it
// returns the store and the file's path.
func setup(t *testing.T, opts sqlite.Options) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "orchestrator.db")
	_, _, err := db.MigrateSQLite(t.Context(), path, db.CmdUp, nil)
	require.NoError(t, err)
	s, err := sqlite.Open(t.Context(), path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, path
}

// rawDB opens a second, independent connection pool on the file: another process, as far as
// SQLite's locking is concerned.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	raw, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	raw.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

func insertJob(t *testing.T, s store.Executor, id string) store.Job {
	t.Helper()
	j, inserted, err := s.JobInsert(t.Context(), store.JobInsertParams{
		ID: id, Type: "noop", Agent: "a", Payload: []byte(`{}`), MaxAttempts: 1, Now: time.Now(),
	})
	require.NoError(t, err)
	require.True(t, inserted)
	return j
}

func TestOpen(t *testing.T) {
	t.Parallel()

	t.Run("TimesInUTCTruncated", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, sqlite.Options{})
		now := time.Date(2031, 5, 6, 7, 8, 9, 999_999_999, time.FixedZone("Y", -7*3600))
		j, _, err := s.JobInsert(t.Context(), store.JobInsertParams{ID: "tz", Type: "noop", Agent: "a", Now: now})
		require.NoError(t, err)
		got, err := s.JobGet(t.Context(), "tz")
		require.NoError(t, err)
		require.Equal(t, time.UTC, got.CreatedAt.Location())
		require.True(t, now.Truncate(time.Microsecond).Equal(got.CreatedAt), "truncated, not rounded: %s", got.CreatedAt)
		require.Equal(t, j.CreatedAt, got.CreatedAt)
		require.True(t, got.AvailableAt.Equal(got.CreatedAt), "zero AvailableAt means Now")
	})

	t.Run("WALMode", func(t *testing.T) {
		t.Parallel()
		_, path := setup(t, sqlite.Options{})
		var mode string
		require.NoError(t, rawDB(t, path).QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode))
		require.Equal(t, "wal", mode)
	})

	t.Run("BadPath", func(t *testing.T) {
		t.Parallel()
		_, err := sqlite.Open(t.Context(), "x.db?mode=ro", sqlite.Options{})
		require.ErrorContains(t, err, "without '?'")
		_, err = sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), sqlite.Options{Synchronous: "sometimes"})
		require.ErrorContains(t, err, "synchronous")
	})

	t.Run("Unwritable", func(t *testing.T) {
		t.Parallel()
		_, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "missing-dir", "x.db"), sqlite.Options{})
		require.Error(t, err)
	})
}

func TestSchemaVersion(t *testing.T) {
	t.Parallel()

	t.Run("Migrated", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, sqlite.Options{})
		v, dirty, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.Equal(t, db.LatestSQLiteVersion(), v)
		require.False(t, dirty)
	})

	t.Run("NoMigrationsTable", func(t *testing.T) {
		t.Parallel()
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "empty.db"), sqlite.Options{})
		require.NoError(t, err)
		defer s.Close()
		v, dirty, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.Zero(t, v)
		require.False(t, dirty)
	})

	t.Run("Dirty", func(t *testing.T) {
		t.Parallel()
		s, path := setup(t, sqlite.Options{})
		_, err := rawDB(t, path).ExecContext(t.Context(), "UPDATE schema_migrations SET dirty = 1")
		require.NoError(t, err)
		_, dirty, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.True(t, dirty)
	})
}

func TestErrorMapping(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, sqlite.Options{})

	t.Run("NotFoundWrapped", func(t *testing.T) {
		t.Parallel()
		_, err := s.JobGet(t.Context(), "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorContains(t, err, "get job nope")
	})

	t.Run("NonASCIIIDIsNotFound", func(t *testing.T) {
		t.Parallel()
		const id = "jöb-✓"
		_, err := s.JobGet(t.Context(), id)
		require.ErrorIs(t, err, store.ErrNotFound)
		err = s.JobUpdate(t.Context(), store.JobUpdate{ID: id, From: store.JobPending, To: store.JobClaimed, Now: time.Now()})
		require.ErrorIs(t, err, store.ErrNotFound)
		jobs, err := s.JobGetMany(t.Context(), []string{id}, false)
		require.NoError(t, err)
		require.Empty(t, jobs)
		n, err := s.JobMarkEnqueued(t.Context(), []store.JobEnqueued{{ID: id}})
		require.NoError(t, err)
		require.Zero(t, n)
		events, err := s.AuditList(t.Context(), store.AuditListParams{JobID: id})
		require.NoError(t, err)
		require.Empty(t, events)
		_, _, err = s.JobInsert(t.Context(), store.JobInsertParams{ID: id, Type: "noop", Agent: "a", Now: time.Now()})
		require.ErrorContains(t, err, "must be ASCII")
	})

	t.Run("ConflictWrapped", func(t *testing.T) {
		t.Parallel()
		j := insertJob(t, s, "conflict")
		err := s.JobUpdate(t.Context(), store.JobUpdate{ID: j.ID, From: store.JobRunning, To: store.JobDone, Now: time.Now()})
		require.ErrorIs(t, err, store.ErrConflict)
		require.ErrorContains(t, err, "update job conflict from running to done")
	})

	t.Run("LongLastErrorTruncated", func(t *testing.T) {
		t.Parallel()
		j := insertJob(t, s, "long-error")
		long := strings.Repeat("é", 40000) // 80000 bytes, more than MariaDB's TEXT holds
		require.NoError(t, s.JobUpdate(t.Context(), store.JobUpdate{ID: j.ID, From: store.JobPending, To: store.JobFailed, LastError: &long, Now: time.Now()}))
		got, err := s.JobGet(t.Context(), j.ID)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(long, got.LastError))
		require.Equal(t, 65534, len(got.LastError), "cut at a rune boundary, as with MariaDB")
	})

	t.Run("InvalidJSONRejected", func(t *testing.T) {
		t.Parallel()
		_, _, err := s.JobInsert(t.Context(), store.JobInsertParams{ID: "bad-json", Type: "noop", Agent: "a", Payload: []byte(`{nope`), Now: time.Now()})
		require.ErrorContains(t, err, "insert job bad-json")
		_, err = s.JobGet(t.Context(), "bad-json")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

func TestWithTx(t *testing.T) {
	t.Parallel()

	t.Run("HoldsWriteLockFromTheStart", func(t *testing.T) {
		t.Parallel()
		// BEGIN IMMEDIATE: even a transaction that has only read holds the write lock, so
		// another process's write waits (and here, with no busy timeout, fails at once).
		s, path := setup(t, sqlite.Options{})
		insertJob(t, s, "locked")
		raw := rawDB(t, path)
		err := s.WithTx(t.Context(), func(tx store.Tx) error {
			if _, err := tx.JobGetMany(t.Context(), []string{"locked"}, true); err != nil {
				return err
			}
			_, err := raw.ExecContext(t.Context(), "UPDATE orchestrator_jobs SET attempts = 7 WHERE job_id = 'locked'")
			require.ErrorContains(t, err, "locked")
			return nil
		})
		require.NoError(t, err)
	})

	t.Run("BusyIsRetried", func(t *testing.T) {
		t.Parallel()
		// A statement that found the database busy fails the attempt with SQLITE_BUSY (here
		// another process's write, refused while this transaction holds the lock): WithTx
		// reruns fn, which succeeds the second time.
		s, path := setup(t, sqlite.Options{})
		raw := rawDB(t, path)
		var calls atomic.Int32
		err := s.WithTx(t.Context(), func(tx store.Tx) error {
			if calls.Add(1) == 1 {
				_, err := raw.ExecContext(t.Context(), "DELETE FROM orchestrator_jobs")
				require.Error(t, err)
				return fmt.Errorf("a step: %w", err)
			}
			_, _, err := tx.JobInsert(t.Context(), store.JobInsertParams{ID: "busy", Type: "noop", Agent: "a", Now: time.Now()})
			return err
		})
		require.NoError(t, err)
		require.EqualValues(t, 2, calls.Load())
		_, err = s.JobGet(t.Context(), "busy")
		require.NoError(t, err)
	})

	t.Run("GivesUpAfterRetries", func(t *testing.T) {
		t.Parallel()
		s, path := setup(t, sqlite.Options{BusyTimeout: time.Millisecond, TxRetries: 2})
		conn, err := rawDB(t, path).Conn(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.ExecContext(t.Context(), "BEGIN IMMEDIATE")
		require.NoError(t, err)
		defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()
		var calls atomic.Int32
		err = s.WithTx(t.Context(), func(_ store.Tx) error {
			calls.Add(1)
			return nil
		})
		require.ErrorContains(t, err, "begin transaction")
		require.ErrorIs(t, err, store.ErrUnavailable, "busy past the retries: try again later")
		require.ErrorContains(t, err, "SQLITE_BUSY", "the driver's error stays in the chain and the message")
		require.Zero(t, calls.Load(), "BEGIN IMMEDIATE itself waits for the lock: fn never ran")
	})

	t.Run("OtherErrorsNotRetried", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, sqlite.Options{})
		var calls atomic.Int32
		err := s.WithTx(t.Context(), func(store.Tx) error {
			calls.Add(1)
			return fmt.Errorf("claim: %w", store.ErrConflict)
		})
		require.ErrorIs(t, err, store.ErrConflict)
		require.EqualValues(t, 1, calls.Load())
	})

	t.Run("StoreWriteInsideTxWaitsForContext", func(t *testing.T) {
		t.Parallel()
		// The documented limitation: a Store write inside WithTx waits for the writer
		// connection the transaction holds, until its context ends.
		s, _ := setup(t, sqlite.Options{})
		err := s.WithTx(t.Context(), func(_ store.Tx) error {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			_, _, err := s.JobInsert(ctx, store.JobInsertParams{ID: "outside", Type: "noop", Agent: "a", Now: time.Now()})
			require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
			return nil
		})
		require.NoError(t, err)
	})

	t.Run("ReadsDoNotWaitForWriter", func(t *testing.T) {
		t.Parallel()
		// WAL: a Store read outside the transaction runs while the transaction holds the
		// write lock, and sees the last committed state.
		s, _ := setup(t, sqlite.Options{})
		insertJob(t, s, "seen")
		err := s.WithTx(t.Context(), func(tx store.Tx) error {
			require.NoError(t, tx.JobUpdate(t.Context(), store.JobUpdate{ID: "seen", From: store.JobPending, To: store.JobClaimed, Now: time.Now()}))
			j, err := s.JobGet(t.Context(), "seen")
			require.NoError(t, err)
			require.Equal(t, store.JobPending, j.Status, "uncommitted change not visible")
			return nil
		})
		require.NoError(t, err)
	})
}

// TestUnavailable checks that a database locked by another process past the busy timeout is
// store.ErrUnavailable, outside a transaction as inside one, and that other errors are not.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	s, path := setup(t, sqlite.Options{BusyTimeout: time.Millisecond, TxRetries: -1})
	insertJob(t, s, "held")
	conn, err := rawDB(t, path).Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(t.Context(), "BEGIN IMMEDIATE")
	require.NoError(t, err)

	_, _, err = s.JobInsert(t.Context(), store.JobInsertParams{ID: "blocked", Type: "noop", Agent: "a", Now: time.Now()})
	require.ErrorIs(t, err, store.ErrUnavailable)
	var se *sqlitedrv.Error
	require.ErrorAs(t, err, &se, "the driver's error stays in the chain")
	err = s.JobUpdate(t.Context(), store.JobUpdate{ID: "held", From: store.JobPending, To: store.JobCancelled, Now: time.Now()})
	require.ErrorIs(t, err, store.ErrUnavailable)
	err = s.WithTx(t.Context(), func(store.Tx) error { return nil })
	require.ErrorIs(t, err, store.ErrUnavailable)

	// Reads go on (WAL), and the store's other errors keep their sentinels.
	_, err = s.JobGet(t.Context(), "held")
	require.NoError(t, err)
	_, err = s.JobGet(t.Context(), "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NotErrorIs(t, err, store.ErrUnavailable)

	_, err = conn.ExecContext(t.Context(), "ROLLBACK")
	require.NoError(t, err)
	_, _, err = s.JobInsert(t.Context(), store.JobInsertParams{ID: "blocked", Type: "noop", Agent: "a", Now: time.Now()})
	require.NoError(t, err, "the lock released, the same write succeeds")
}
