// Package mysql is the MariaDB driver of store.Store (go-sql-driver/mysql).
//
// Times are written in UTC, truncated to microseconds (DATETIME(6)), and read back in UTC. MySQL
// errors are mapped to the store's sentinels at the boundary: no row is store.ErrNotFound, a
// duplicate key (1062) is store.ErrConflict, and a server that cannot serve now (unreachable,
// a broken connection, too many connections, shutting down, a deadlock or lock wait timeout
// past the reruns) is store.ErrUnavailable. Deadlocks (1213) and lock wait timeouts (1205)
// inside WithTx retry the whole transaction; outside one, the statement (autocommit).
package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
	"github.com/gpuorch/orchestrator/store/internal/txretry"
)

// Defaults of Options.
const (
	MaxOpenConnsDefault    = 50
	ConnMaxLifetimeDefault = 5 * time.Minute
	TxRetriesDefault       = 3
)

// MySQL error numbers the driver handles.
const (
	errDuplicateKey    = 1062
	errNoSuchTable     = 1146
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
)

// unavailableNumbers are the server errors that say "not now", not "this request is wrong":
// too many connections (1040), server shutting down (1053), lock wait timeout (1205) and
// deadlock (1213) once the reruns are spent, query interrupted (1317).
var unavailableNumbers = map[uint16]bool{1040: true, 1053: true, errLockWaitTimeout: true, errDeadlock: true, 1317: true}

// Options tunes the connection pool and the transaction retries. Zero values take the defaults.
type Options struct {
	// MaxOpenConns caps the open connections (default MaxOpenConnsDefault).
	MaxOpenConns int
	// MaxIdleConns caps the idle connections kept (default: MaxOpenConns, so that a burst does
	// not pay for reconnecting).
	MaxIdleConns int
	// ConnMaxLifetime recycles connections (default ConnMaxLifetimeDefault), which spreads load
	// after a failover and stays below server-side wait_timeout.
	ConnMaxLifetime time.Duration
	// TxRetries is how many times WithTx reruns a transaction that hit a deadlock or a lock wait
	// timeout (default TxRetriesDefault; negative: never).
	TxRetries int
}

func (o Options) withDefaults() Options {
	o.MaxOpenConns = cmp.Or(o.MaxOpenConns, MaxOpenConnsDefault)
	o.MaxIdleConns = cmp.Or(o.MaxIdleConns, o.MaxOpenConns)
	o.ConnMaxLifetime = cmp.Or(o.ConnMaxLifetime, ConnMaxLifetimeDefault)
	o.TxRetries = cmp.Or(o.TxRetries, TxRetriesDefault)
	if o.TxRetries < 0 {
		o.TxRetries = 0
	}
	return o
}

// Store is the MariaDB store.Store. It is safe for concurrent use.
type Store struct {
	executor
	db *sql.DB
	txretry.Transactions
	isolation string // Isolation
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.Tx          = (*tx)(nil)
	_ store.StatsReader = (*Store)(nil)
)

// Open connects to the database of dsn (go-sql-driver form) and checks that it answers. It
// forces the settings the driver relies on: parseTime=true and loc=UTC (times come back as
// UTC time.Time), time_zone='+00:00' (server-side time functions agree), clientFoundRows=true
// (an UPDATE that matches a row but changes nothing still counts it, so a compare-and-set
// with unchanged values is not mistaken for a conflict), interpolateParams=true (one round
// trip per statement instead of prepare + execute + close) and multiStatements=true (a
// transaction sends several statements in one round trip: txconn.go). Every argument is
// interpolated by the driver, escaped; no statement is built from input. Sessions run at READ
// COMMITTED unless the DSN or the server's binary log says otherwise (isolation.go; Isolation
// tells which).
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("open mysql store: parse dsn: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("open mysql store: the dsn names no database")
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.ClientFoundRows = true
	cfg.InterpolateParams = true
	cfg.MultiStatements = true // a transaction folds statements into one round trip (txconn.go)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	opts = opts.withDefaults()
	sqlDB, err := connect(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	logBin, format, err := binlogSettings(ctx, sqlDB)
	if err != nil {
		_ = sqlDB.Close() // the open error is the one to report
		return nil, fmt.Errorf("open mysql store: %w", err)
	}
	choice := chooseIsolation(cfg.Params, logBin, format)
	if choice.set {
		// The pool's sessions take the level when they connect: start it again with it.
		if err := sqlDB.Close(); err != nil {
			return nil, fmt.Errorf("open mysql store: reconnect: %w", err)
		}
		cfg.Params[readCommittedParam] = "'READ-COMMITTED'"
		if sqlDB, err = connect(ctx, cfg, opts); err != nil {
			return nil, err
		}
	}
	level, err := sessionIsolation(ctx, sqlDB)
	if err != nil {
		_ = sqlDB.Close() // the open error is the one to report
		return nil, fmt.Errorf("open mysql store: %w", err)
	}
	if choice.why != "" {
		level += " (" + choice.why + ")"
	}
	retry := txretry.Policy{Retries: opts.TxRetries, Retryable: retryable}
	s := &Store{executor: on(autocommit{db: sqlDB, retry: retry}), db: sqlDB, isolation: level}
	s.Transactions = txretry.NewTransactions(retry, s.runTx, unavailable)
	return s, nil
}

// connect opens the pool of cfg and checks that the server answers.
func connect(ctx context.Context, cfg *mysql.Config, opts Options) (*sql.DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql store: %w", err)
	}
	sqlDB := sql.OpenDB(connector)
	sqlDB.SetMaxOpenConns(opts.MaxOpenConns)
	sqlDB.SetMaxIdleConns(opts.MaxIdleConns)
	sqlDB.SetConnMaxLifetime(opts.ConnMaxLifetime)
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close() // the connect error is the one to report
		return nil, fmt.Errorf("open mysql store: connect to %s: %w", cfg.Addr, err)
	}
	return sqlDB, nil
}

// Isolation is the sessions' transaction isolation level, as the server names it
// ("READ-COMMITTED"), with the reason when it is not the one Open sets.
func (s *Store) Isolation() string { return s.isolation }

// tx is the store.Tx of one open transaction. It must not be used after WithTx's fn returns.
type tx struct {
	executor
}

// DeferChecks makes the transaction's later compare-and-set writes wait for its next round
// trip (store.Tx), where the rows each matched are checked (txconn.go).
func (t *tx) DeferChecks() {
	t.q.(*txConn).deferChecks = true
}

// Flush sends START TRANSACTION and the held writes now (store.Tx), checking the deferred ones.
func (t *tx) Flush(ctx context.Context) error {
	c := t.q.(*txConn)
	if c.err != nil {
		return c.err
	}
	err := c.flushIfLarge(ctx, "", nil) // sends them one by one when they are large
	if err == nil && (!c.begun || len(c.held) > 0) {
		_, err = c.exec(ctx, c.fold("", nil))
	}
	if err != nil {
		// A taken job id is a conflict however the held insert went out.
		return fmt.Errorf("send held writes: %w", mapErr(err))
	}
	return nil
}

// autocommit is the Store's connection (sqlgen.Conn) outside a transaction: every statement
// commits on its own, and one that a deadlock or a lock wait timeout rolled back runs again, up
// to Options.TxRetries times, as WithTx reruns a transaction. Rerunning is safe because the
// server undid the whole statement; a text of several statements (none is sent this way) is not
// rerun, as the ones before the failure have committed. A read through QueryRowContext is not
// rerun either: its error only comes out of Scan.
type autocommit struct {
	db    *sql.DB
	retry txretry.Policy
}

func (a autocommit) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := rerun(ctx, a, query, func() (sql.Result, error) { return a.db.ExecContext(ctx, query, args...) })
	return res, unavailable(err)
}

func (a autocommit) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := rerun(ctx, a, query, func() (*sql.Rows, error) { return a.db.QueryContext(ctx, query, args...) })
	return rows, unavailable(err)
}

// rerun runs do, and again after a deadlock or a lock wait timeout, unless query holds
// several statements (see autocommit).
func rerun[T any](ctx context.Context, a autocommit, query string, do func() (T, error)) (T, error) {
	p := a.retry
	if strings.Contains(query, ";") {
		p.Retries = 0
	}
	return txretry.Do(ctx, p, do)
}

func (a autocommit) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return a.db.QueryRowContext(ctx, query, args...)
}

// runTx runs fn in one transaction (READ COMMITTED: see isolation.go), committing when fn
// returns nil and rolling back otherwise, for WithTx (txretry.Transactions), which reruns it
// after a deadlock or a lock wait timeout, whether from fn's statements or from the commit, up
// to Options.TxRetries times.
func (s *Store) runTx(ctx context.Context, fn func(store.Tx) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	t := &txConn{conn: conn}
	committed := false
	defer func() {
		if !committed { // fn failed or panicked, or the commit failed: roll back
			t.release(t.rollback())
		}
	}()
	if err := fn(&tx{on(t)}); err != nil {
		return t.annotate(cmp.Or(t.err, err))
	}
	if err := t.commit(ctx); err != nil {
		// A held write that failed fails the commit: a taken lease token is still a conflict.
		return fmt.Errorf("commit transaction: %w", mapErr(err))
	}
	committed = true
	t.release(true)
	return nil
}

// retryable reports whether err is a deadlock or a lock wait timeout, after which rerunning
// the whole transaction is expected to succeed.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errLockWaitTimeout)
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping mysql: %w", unavailable(err))
	}
	return nil
}

// SchemaVersion returns the version golang-migrate recorded (0, false when no migration ever
// ran, including when its table does not exist).
func (s *Store) SchemaVersion(ctx context.Context) (uint, bool, error) {
	return sqlgen.SchemaVersion(ctx, s.db, func(err error) bool {
		var me *mysql.MySQLError
		return errors.As(err, &me) && me.Number == errNoSuchTable
	})
}

// Close releases the connections.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close mysql store: %w", err)
	}
	return nil
}

// mapErr translates driver errors into the store's sentinels (sqlgen.MapErr): a duplicate key
// (1062) is the taken key of store.ErrConflict.
func mapErr(err error) error {
	return sqlgen.MapErr(err, func(err error) bool {
		var me *mysql.MySQLError
		return errors.As(err, &me) && me.Number == errDuplicateKey
	}, unavailable)
}

// unavailable marks err store.ErrUnavailable when it says the server cannot serve now (see
// isUnavailable); other errors, nil included, come back as they are. It runs where errors
// leave the driver's statements (autocommit, txConn, mapErr) and on WithTx's result.
func unavailable(err error) error {
	if err != nil && isUnavailable(err) {
		return store.Unavailable(err)
	}
	return err
}

// isUnavailable reports whether err says the server cannot serve now: one of
// unavailableNumbers, a broken connection, or a network error (refused, reset, timed out).
// The caller's own context ending is not the server's fault and is left to the caller.
func isUnavailable(err error) bool {
	var (
		me     *mysql.MySQLError
		netErr net.Error
	)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false // context.DeadlineExceeded is a net.Error too
	case errors.As(err, &me):
		return unavailableNumbers[me.Number]
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
