package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // Asia/Tokyo without the system database

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/mysql"
	"github.com/gpuorch/orchestrator/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return testenv.MySQLStore(t) })
}

// setup opens a store on a fresh database and returns it with the raw DSN.
func setup(t testing.TB, opts mysql.Options) (*mysql.Store, string) {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	s, err := mysql.Open(t.Context(), dsn, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, dsn
}

// repeatableRead opens a store on a fresh database with a DSN that asks for REPEATABLE READ,
// which Open keeps.
func repeatableRead(t *testing.T) *mysql.Store {
	t.Helper()
	cfg, err := gomysql.ParseDSN(testenv.MySQLDSN(t))
	require.NoError(t, err)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["tx_isolation"] = "'REPEATABLE-READ'"
	s, err := mysql.Open(t.Context(), cfg.FormatDSN(), mysql.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func insertJob(t *testing.T, s store.Executor, id string) store.Job {
	t.Helper()
	j, inserted, err := s.JobInsert(t.Context(), store.JobInsertParams{
		ID: id, Type: "noop", Agent: "a", Payload: []byte(`{}`), MaxAttempts: 1,
		Now: time.Now(),
	})
	require.NoError(t, err)
	require.True(t, inserted)
	return j
}

func TestOpen(t *testing.T) {
	t.Parallel()

	t.Run("ForcesDSNSettings", func(t *testing.T) {
		t.Parallel()
		// A DSN without parseTime and with another location still yields UTC times.
		cfg, err := gomysql.ParseDSN(testenv.MySQLDSN(t))
		require.NoError(t, err)
		cfg.ParseTime = false
		cfg.Loc, err = time.LoadLocation("Asia/Tokyo")
		require.NoError(t, err)
		s, err := mysql.Open(t.Context(), cfg.FormatDSN(), mysql.Options{})
		require.NoError(t, err)
		defer s.Close()

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

	t.Run("ReadCommitted", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, mysql.Options{})
		require.Equal(t, "READ-COMMITTED", s.Isolation())
		// A transaction's second read sees a row another session committed after its first.
		insertJob(t, s, "rc")
		err := s.WithTx(t.Context(), func(tx store.Tx) error {
			j, err := tx.JobGet(t.Context(), "rc")
			require.NoError(t, err)
			require.Equal(t, store.JobPending, j.Status)
			require.NoError(t, s.JobUpdateMany(t.Context(), []store.JobUpdate{{ID: "rc", From: store.JobPending,
				To: store.JobCancelled, Now: time.Now()}}))
			j, err = tx.JobGet(t.Context(), "rc")
			require.NoError(t, err)
			require.Equal(t, store.JobCancelled, j.Status, "the second read is of the latest committed row")
			return nil
		})
		require.NoError(t, err)
	})

	t.Run("IsolationOfTheDSN", func(t *testing.T) {
		t.Parallel()
		s := repeatableRead(t)
		require.Equal(t, "REPEATABLE-READ (set by the DSN (tx_isolation))", s.Isolation())
	})

	t.Run("NoDatabaseName", func(t *testing.T) {
		t.Parallel()
		_, err := mysql.Open(t.Context(), "root@tcp(127.0.0.1:3306)/", mysql.Options{})
		require.ErrorContains(t, err, "names no database")
	})

	t.Run("BadDSN", func(t *testing.T) {
		t.Parallel()
		_, err := mysql.Open(t.Context(), "not a dsn", mysql.Options{})
		require.Error(t, err)
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := mysql.Open(ctx, "root@tcp(127.0.0.1:1)/x", mysql.Options{})
		require.ErrorContains(t, err, "connect to 127.0.0.1:1")
	})
}

func TestSchemaVersion(t *testing.T) {
	t.Parallel()

	t.Run("Migrated", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, mysql.Options{})
		v, dirty, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.Equal(t, db.LatestMySQLVersion(), v)
		require.False(t, dirty)
	})

	t.Run("NoMigrationsTable", func(t *testing.T) {
		t.Parallel()
		s, err := mysql.Open(t.Context(), testenv.MySQLEmptyDSN(t), mysql.Options{})
		require.NoError(t, err)
		defer s.Close()
		v, dirty, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.Zero(t, v)
		require.False(t, dirty)
	})

	t.Run("Dirty", func(t *testing.T) {
		t.Parallel()
		s, dsn := setup(t, mysql.Options{})
		raw, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		defer raw.Close()
		_, err = raw.ExecContext(t.Context(), "UPDATE schema_migrations SET dirty = 1")
		require.NoError(t, err)
		_, dirty, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.True(t, dirty)
	})
}

func TestErrorMapping(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, mysql.Options{})

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
		long := strings.Repeat("é", 40000) // 80000 bytes, more than TEXT holds
		require.NoError(t, s.JobUpdate(t.Context(), store.JobUpdate{ID: j.ID, From: store.JobPending, To: store.JobFailed, LastError: &long, Now: time.Now()}))
		got, err := s.JobGet(t.Context(), j.ID)
		require.NoError(t, err)
		require.LessOrEqual(t, len(got.LastError), 65535)
		require.True(t, strings.HasPrefix(long, got.LastError))
		require.Equal(t, 65534, len(got.LastError), "cut at a rune boundary")
	})
}

func TestInsertDuplicateAfterSnapshot(t *testing.T) {
	t.Parallel()
	// Under REPEATABLE READ (which a DSN may ask for) the transaction's snapshot predates the
	// other insert; the duplicate path must still find the committed row instead of reporting
	// it missing.
	s := repeatableRead(t)
	err := s.WithTx(t.Context(), func(tx store.Tx) error {
		_, err := tx.JobGet(t.Context(), "snap")
		require.ErrorIs(t, err, store.ErrNotFound)
		other := insertJob(t, s, "snap") // another connection, committed at once
		got, inserted, err := tx.JobInsert(t.Context(), store.JobInsertParams{ID: "snap", Type: "x", Agent: "b", Now: time.Now()})
		require.NoError(t, err)
		require.False(t, inserted)
		require.Equal(t, other.Type, got.Type)
		return nil
	})
	require.NoError(t, err)
}

func TestWithTxRetry(t *testing.T) {
	t.Parallel()

	deadlock := &gomysql.MySQLError{Number: 1213, Message: "Deadlock found"}

	t.Run("GivesUpAfterRetries", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, mysql.Options{TxRetries: 2})
		var calls atomic.Int32
		err := s.WithTx(t.Context(), func(store.Tx) error {
			calls.Add(1)
			return fmt.Errorf("claim: %w", deadlock)
		})
		require.ErrorIs(t, err, deadlock)
		require.EqualValues(t, 3, calls.Load(), "first run + 2 retries")
	})

	t.Run("DefaultRetries", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, mysql.Options{})
		var calls atomic.Int32
		err := s.WithTx(t.Context(), func(store.Tx) error {
			calls.Add(1)
			return &gomysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
		})
		require.Error(t, err)
		require.EqualValues(t, 1+mysql.TxRetriesDefault, calls.Load())
	})

	t.Run("OtherErrorsNotRetried", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, mysql.Options{})
		var calls atomic.Int32
		err := s.WithTx(t.Context(), func(store.Tx) error {
			calls.Add(1)
			return store.ErrConflict
		})
		require.ErrorIs(t, err, store.ErrConflict)
		require.EqualValues(t, 1, calls.Load())
	})

	t.Run("RealDeadlock", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, mysql.Options{})
		insertJob(t, s, "dl-1")
		insertJob(t, s, "dl-2")

		// Two transactions lock dl-1 and dl-2 in opposite orders. Each takes its first lock,
		// waits until the other has taken its own, then asks for the other's: InnoDB picks a
		// victim (1213), WithTx reruns it, and both end up committed.
		var calls atomic.Int32
		locked := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
		run := func(me int, first, second string) error {
			var attempt int
			return s.WithTx(t.Context(), func(tx store.Tx) error {
				calls.Add(1)
				attempt++
				if _, err := tx.JobGetMany(t.Context(), []string{first}, true); err != nil {
					return err
				}
				if attempt == 1 {
					close(locked[me])
					<-locked[1-me]
				}
				if _, err := tx.JobGetMany(t.Context(), []string{second}, true); err != nil {
					return err
				}
				return tx.JobUpdate(t.Context(), store.JobUpdate{ID: first, From: store.JobPending, To: store.JobPending, Attempts: new(1 + me), Now: time.Now()})
			})
		}
		var wg sync.WaitGroup
		var errs [2]error
		wg.Go(func() { errs[0] = run(0, "dl-1", "dl-2") })
		wg.Go(func() { errs[1] = run(1, "dl-2", "dl-1") })
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.EqualValues(t, 3, calls.Load(), "one victim rerun")
	})

	t.Run("ContextCancelledDuringBackoff", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, mysql.Options{})
		ctx, cancel := context.WithCancel(t.Context())
		err := s.WithTx(ctx, func(store.Tx) error {
			cancel()
			return deadlock
		})
		require.ErrorIs(t, err, context.Canceled)
		require.True(t, errors.Is(err, deadlock))
	})
}

// TestAutocommitRerun checks that a statement outside a transaction which InnoDB picks as a
// deadlock's victim runs again instead of failing.
func TestAutocommitRerun(t *testing.T) {
	t.Parallel()
	s, dsn := setup(t, mysql.Options{})
	ctx := t.Context()
	insertJob(t, s, "ar-1")
	insertJob(t, s, "ar-2")
	raw, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	defer raw.Close()
	conn, err := raw.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()

	// A transaction heavier than the store's UPDATE (50 rows written: InnoDB rolls back the
	// lighter party) locks ar-2. The UPDATE locks ar-1 and waits for ar-2, and the transaction
	// then asks for ar-1.
	_, err = conn.ExecContext(ctx, "START TRANSACTION")
	require.NoError(t, err)
	for range 50 {
		_, err = conn.ExecContext(ctx, `INSERT INTO orchestrator_audit (ts, event_type, job_id, lease_token, pool_id,
			actor, details) VALUES (NOW(6), 'test.weight', NULL, '', '', 'test', NULL)`)
		require.NoError(t, err)
	}
	_, err = conn.ExecContext(ctx, "SELECT job_id FROM orchestrator_jobs WHERE job_id = 'ar-2' FOR UPDATE")
	require.NoError(t, err)
	updated := make(chan error, 1)
	go func() {
		updated <- s.JobUpdateMany(ctx, []store.JobUpdate{
			{ID: "ar-1", From: store.JobPending, To: store.JobCancelled, Now: time.Now()},
			{ID: "ar-2", From: store.JobPending, To: store.JobCancelled, Now: time.Now()},
		})
	}()
	require.Eventually(t, func() bool {
		var n int
		err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE db = DATABASE() AND state = 'Updating' AND info LIKE 'UPDATE orchestrator_jobs%'`).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond, "the UPDATE waits for ar-2")
	_, err = conn.ExecContext(ctx, "SELECT job_id FROM orchestrator_jobs WHERE job_id = 'ar-1' FOR UPDATE")
	require.NoError(t, err, "the UPDATE, not this transaction, is the deadlock's victim")
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)

	require.NoError(t, <-updated, "the UPDATE ran again after the deadlock")
	for _, id := range []string{"ar-1", "ar-2"} {
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.JobCancelled, j.Status)
	}
}

// TestUnavailable checks that a server that cannot serve now is store.ErrUnavailable, with
// the driver's error still in the chain: a lock held past the lock wait timeout (after the
// reruns), and a server that went away.
func TestUnavailable(t *testing.T) {
	t.Parallel()

	t.Run("LockWaitTimeout", func(t *testing.T) {
		t.Parallel()
		cfg, err := gomysql.ParseDSN(testenv.MySQLDSN(t))
		require.NoError(t, err)
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["innodb_lock_wait_timeout"] = "1"
		s, err := mysql.Open(t.Context(), cfg.FormatDSN(), mysql.Options{TxRetries: -1})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		insertJob(t, s, "held")

		raw, err := sql.Open("mysql", cfg.FormatDSN())
		require.NoError(t, err)
		defer raw.Close()
		conn, err := raw.Conn(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.ExecContext(t.Context(), "START TRANSACTION")
		require.NoError(t, err)
		_, err = conn.ExecContext(t.Context(), "SELECT job_id FROM orchestrator_jobs WHERE job_id = 'held' FOR UPDATE")
		require.NoError(t, err)
		defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()

		err = s.JobUpdate(t.Context(), store.JobUpdate{ID: "held", From: store.JobPending, To: store.JobCancelled, Now: time.Now()})
		require.ErrorIs(t, err, store.ErrUnavailable)
		var me *gomysql.MySQLError
		require.ErrorAs(t, err, &me)
		require.EqualValues(t, 1205, me.Number)
		err = s.WithTx(t.Context(), func(tx store.Tx) error {
			_, err := tx.JobGetMany(t.Context(), []string{"held"}, true)
			return err
		})
		require.ErrorIs(t, err, store.ErrUnavailable)

		_, err = s.JobGet(t.Context(), "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.NotErrorIs(t, err, store.ErrUnavailable)
	})

	t.Run("ServerGone", func(t *testing.T) {
		t.Parallel()
		cfg, err := gomysql.ParseDSN(testenv.MySQLDSN(t))
		require.NoError(t, err)
		proxy := newProxy(t, cfg.Addr)
		cfg.Addr = proxy.addr()
		s, err := mysql.Open(t.Context(), cfg.FormatDSN(), mysql.Options{TxRetries: -1})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		insertJob(t, s, "before")

		proxy.close() // the server is gone: connections drop, new ones are refused
		_, err = s.JobGet(t.Context(), "before")
		require.ErrorIs(t, err, store.ErrUnavailable)
		_, _, err = s.JobInsert(t.Context(), store.JobInsertParams{ID: "after", Type: "noop", Agent: "a", Now: time.Now()})
		require.ErrorIs(t, err, store.ErrUnavailable)
		err = s.WithTx(t.Context(), func(tx store.Tx) error {
			_, err := tx.JobGetMany(t.Context(), []string{"before"}, true)
			return err
		})
		require.ErrorIs(t, err, store.ErrUnavailable)
		require.ErrorIs(t, s.Ping(t.Context()), store.ErrUnavailable)
	})
}

// proxy forwards TCP connections to a server until close, which drops them all and refuses
// new ones: a database that went away, as its clients see it.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln}
	t.Cleanup(p.close)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}
