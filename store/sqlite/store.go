// Package sqlite is the SQLite driver of store.Store (modernc.org/sqlite, pure Go: no cgo), the
// database of the embedded single-node mode (`orchestrator dev`, or one GPU host in production).
// It passes the same conformance suite (store/storetest) as the MariaDB driver.
//
// # Transactions and locking
//
// SQLite has one writer at a time per database file; MariaDB locks rows. The driver maps the
// MariaDB semantics the rest of the code relies on onto that model:
//
//   - All writes go through one dedicated connection (a pool of size 1), so writers queue in
//     Go, in arrival order and honouring their contexts, instead of spinning on SQLITE_BUSY.
//     Reads outside a transaction use a separate pool of read-only connections, which WAL mode
//     lets run concurrently with the writer; they see the latest committed data.
//   - WithTx runs on the writer connection with BEGIN IMMEDIATE: the transaction holds the
//     database's write lock from its first statement to its end. Every transaction is
//     therefore serializable, and what MariaDB obtains with locking reads is already given:
//     JobGetMany's forUpdate (SELECT ... FOR UPDATE) and LeaderCheckTerm's shared lock
//     (LOCK IN SHARE MODE) are plain reads here. In particular no LeaderAcquire can commit
//     while a fenced transaction runs, which is the fencing guarantee of store.LeaderExecutor.
//   - Consequence: code inside WithTx must use the Tx it was given, never the Store, for
//     writes: a Store write waits for the writer connection that the transaction holds, until
//     its context ends. (With MariaDB such a write only waits when it touches a locked row.)
//   - SQLITE_BUSY (another process, such as an operator's sqlite3 shell, holding the lock past
//     the busy timeout) is retried by WithTx like a MariaDB deadlock. Once the retries are
//     spent, SQLITE_BUSY and SQLITE_LOCKED (any extended code) are store.ErrUnavailable, as
//     MariaDB's lock wait timeouts are: the same call may succeed later.
//
// # Storage
//
// The database runs in WAL mode with a busy timeout and synchronous=FULL by default (a
// committed transaction survives a power loss, as with InnoDB's default). Times are stored as
// INTEGER microseconds since the Unix epoch (truncated, like DATETIME(6)) and read back in
// UTC; JSON as TEXT checked by json_valid. Job ids must be ASCII and last_error is
// cut at 65535 bytes, exactly as with MariaDB, so both drivers accept the same data.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
	"github.com/gpuorch/orchestrator/store/internal/txretry"
)

// DBFileName is the embedded mode's database file in its data directory.
const DBFileName = "orchestrator.db"

// Defaults of Options.
const (
	BusyTimeoutDefault = 5 * time.Second
	TxRetriesDefault   = 3
	SynchronousDefault = "FULL"
)

// Options tunes the connections. Zero values take the defaults.
type Options struct {
	// MaxReadConns caps the read-only connections used outside transactions (default: the
	// number of CPUs, at least 4).
	MaxReadConns int
	// BusyTimeout is how long a statement waits for a lock held by another process before
	// failing with SQLITE_BUSY (default BusyTimeoutDefault).
	BusyTimeout time.Duration
	// Synchronous is PRAGMA synchronous: FULL (default) fsyncs every commit; NORMAL is faster
	// and still safe against a crash of the process, but may lose the last commits on a
	// power loss.
	Synchronous string
	// TxRetries is how many times WithTx reruns a transaction that found the database busy
	// (default TxRetriesDefault; negative: never).
	TxRetries int
}

func (o Options) withDefaults() Options {
	o.MaxReadConns = cmp.Or(o.MaxReadConns, max(4, runtime.NumCPU()))
	o.BusyTimeout = cmp.Or(o.BusyTimeout, BusyTimeoutDefault)
	o.Synchronous = strings.ToUpper(cmp.Or(o.Synchronous, SynchronousDefault))
	o.TxRetries = cmp.Or(o.TxRetries, TxRetriesDefault)
	if o.TxRetries < 0 {
		o.TxRetries = 0
	}
	return o
}

// Store is the SQLite store.Store. It is safe for concurrent use.
type Store struct {
	executor
	writer *sql.DB // one connection: every write and every transaction
	reader *sql.DB // read-only connections for reads outside transactions
	txretry.Transactions
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.Tx          = (*tx)(nil)
	_ store.StatsReader = (*Store)(nil)
)

// Open opens the database file at path (created when missing; its schema comes from
// db.MigrateSQLite) and checks that it answers.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("open sqlite store: database path %q: want a file name without '?'", path)
	}
	opts = opts.withDefaults()
	switch opts.Synchronous {
	case "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		return nil, fmt.Errorf("open sqlite store: synchronous %q: want OFF, NORMAL, FULL or EXTRA", opts.Synchronous)
	}
	pragmas := func(extra ...string) string {
		q := url.Values{}
		q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous("+opts.Synchronous+")")
		for _, p := range extra {
			q.Add("_pragma", p)
		}
		return path + "?" + q.Encode()
	}
	writer, err := sql.Open("sqlite", pragmas()+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	reader, err := sql.Open("sqlite", pragmas("query_only(1)"))
	if err != nil {
		_ = writer.Close() // the open error is the one to report
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	reader.SetMaxOpenConns(opts.MaxReadConns)
	reader.SetMaxIdleConns(opts.MaxReadConns)
	s := &Store{executor: on(classified{reader}, classified{writer}), writer: writer, reader: reader}
	s.Transactions = txretry.NewTransactions(txretry.Policy{Retries: opts.TxRetries, Retryable: retryable},
		s.runTx, unavailable)
	if err := s.Ping(ctx); err != nil {
		_ = s.Close() // the ping error is the one to report
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	return s, nil
}

// tx is the store.Tx of one open transaction: reads and writes use the transaction. It must
// not be used after WithTx's fn returns.
type tx struct {
	executor
}

// DeferChecks does nothing here (store.Tx): an SQLite statement is a call, not a round trip,
// so nothing would be saved.
func (*tx) DeferChecks() {}

// Flush does nothing (store.Tx): SQLite runs every statement when it is called.
func (*tx) Flush(context.Context) error { return nil }

// LockJobsAndLeases reads the jobs, then the leases (store.Tx). The transaction's BEGIN
// IMMEDIATE holds the only writer's lock already. The payloads not asked for are dropped
// after the read: an SQLite read is a copy in this process, not a transfer.
func (t *tx) LockJobsAndLeases(ctx context.Context, p store.LockParams) ([]store.Job, []store.Lease, error) {
	jobs, err := t.JobGetMany(ctx, p.Jobs, true)
	if err != nil {
		return nil, nil, err
	}
	for i := range jobs {
		if !slices.Contains(p.Payloads, jobs[i].ID) {
			jobs[i].Payload = nil
		}
	}
	leases, err := t.LeaseGetMany(ctx, p.Leases, true)
	return jobs, leases, err
}

// runTx runs fn in one BEGIN IMMEDIATE transaction (see the package doc), committing when fn
// returns nil and rolling back otherwise, for WithTx (txretry.Transactions), which reruns it
// after SQLITE_BUSY, whether from fn's statements or from the commit, up to
// Options.TxRetries times.
func (s *Store) runTx(ctx context.Context, fn func(store.Tx) error) error {
	sqlTx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	finished := false
	defer func() {
		if !finished { // fn panicked: roll back, let the panic go on
			_ = sqlTx.Rollback()
		}
	}()
	err = fn(&tx{on(classified{sqlTx}, classified{sqlTx})})
	finished = true
	if err != nil {
		_ = sqlTx.Rollback()
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}

// retryable reports whether err is SQLITE_BUSY or SQLITE_LOCKED (any extended code), after
// which rerunning the whole transaction is expected to succeed.
func retryable(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	primary := se.Code() & 0xff
	return primary == sqlite3.SQLITE_BUSY || primary == sqlite3.SQLITE_LOCKED
}

// Ping checks that both connection pools answer.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.writer.PingContext(ctx); err != nil {
		return fmt.Errorf("ping sqlite: %w", unavailable(err))
	}
	if err := s.reader.PingContext(ctx); err != nil {
		return fmt.Errorf("ping sqlite: %w", unavailable(err))
	}
	return nil
}

// SchemaVersion returns the version golang-migrate recorded (0, false when no migration ever
// ran, including when its table does not exist).
func (s *Store) SchemaVersion(ctx context.Context) (uint, bool, error) {
	var exists int
	err := s.reader.QueryRowContext(ctx,
		"SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'").Scan(&exists)
	if err != nil {
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	if exists == 0 {
		return 0, false, nil
	}
	return sqlgen.SchemaVersion(ctx, s.reader, func(error) bool { return false })
}

// Close releases the connections. The writer goes last, so that SQLite checkpoints the WAL
// into the database file when the last connection closes.
func (s *Store) Close() error {
	rerr := s.reader.Close()
	werr := s.writer.Close()
	if err := errors.Join(rerr, werr); err != nil {
		return fmt.Errorf("close sqlite store: %w", err)
	}
	return nil
}

// mapErr translates driver errors into the store's sentinels (sqlgen.MapErr): a violated
// PRIMARY KEY or UNIQUE constraint is the taken key of store.ErrConflict.
func mapErr(err error) error {
	return sqlgen.MapErr(err, func(err error) bool {
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return false
		}
		code := se.Code()
		return code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || code == sqlite3.SQLITE_CONSTRAINT_UNIQUE
	}, unavailable)
}

// unavailable marks err store.ErrUnavailable when it is SQLITE_BUSY or SQLITE_LOCKED (any
// extended code: another connection or process holds the lock past the busy timeout); other
// errors, nil included, come back as they are. It runs where errors leave the driver's
// statements (classified, mapErr) and on WithTx's result, after its reruns.
func unavailable(err error) error {
	if err != nil && retryable(err) {
		return store.Unavailable(err)
	}
	return err
}

// classified is a connection (sqlgen.Conn) whose statement errors are marked by unavailable. A
// QueryRowContext error only comes out of Scan, which mapErr marks.
type classified struct{ q sqlgen.Conn }

func (c classified) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := c.q.ExecContext(ctx, query, args...)
	return res, unavailable(err)
}

func (c classified) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := c.q.QueryContext(ctx, query, args...)
	return rows, unavailable(err)
}

func (c classified) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return c.q.QueryRowContext(ctx, query, args...)
}
