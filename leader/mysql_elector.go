package leader

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
)

// errLockLost is the step-down reason when the leader's connection answers but no longer
// owns the lock.
var errLockLost = errors.New("the lock is no longer held by this instance's connection")

// MySQLElector elects one leader among the orchestrator instances of a cluster with a MariaDB
// GET_LOCK.
//
// A MariaDB lock belongs to the physical connection that took it, so the elector pins one
// (sql.DB.Conn) for as long as it leads: returning it to the pool would keep the lock in the
// pool, so to give the lock up the connection is discarded. Followers try GET_LOCK(name, 0)
// every Interval ± jitter; the leader checks every Interval that IS_USED_LOCK(name) is still
// its CONNECTION_ID() and steps down at once when it is not or when the check fails, because
// it can no longer tell whether a follower took over. The leader's connection gets a short
// wait_timeout, so that a frozen leader's lock is freed by the server; the term (RunFenced)
// makes whatever such a leader writes on waking up harmless.
type MySQLElector struct {
	startstop.Base
	core
	db *sql.DB

	// conn is the pinned connection that holds the lock while leading (run goroutine only).
	conn *sql.Conn
	// connID is conn's CONNECTION_ID() while leading, 0 otherwise (tests kill it).
	connID atomic.Int64
}

// NewMySQL returns an elector that takes the lock on connections of db (any pool on the
// cluster's MariaDB server; the store's pool will do) and records terms in st. It fails when
// cfg is invalid.
func NewMySQL(db *sql.DB, st store.Store, cfg Config) (*MySQLElector, error) {
	if db == nil || st == nil {
		return nil, errors.New("new mysql elector: db and store are required")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("new mysql elector: %w", err)
	}
	return &MySQLElector{core: newCore(st, cfg), db: db}, nil
}

// Start campaigns in the background until Stop or the end of ctx. It returns at once; a
// database that does not answer is retried with backoff.
func (e *MySQLElector) Start(ctx context.Context) error {
	e.Go(ctx, func(ctx context.Context) {
		defer e.resign()
		e.loop(ctx, e.runOnce)
	})
	return nil
}

// runOnce is one election step: a follower campaigns, a leader checks that it still holds the
// lock (stepping down when not). It returns the delay to the next step.
func (e *MySQLElector) runOnce(ctx context.Context) (time.Duration, error) {
	if e.leading == nil {
		if err := e.campaign(ctx); err != nil {
			return 0, err
		}
		return e.interval(1), nil
	}
	if err := e.check(ctx); err != nil {
		if ctx.Err() != nil { // stopping: resign, not lost
			return 0, ctx.Err()
		}
		e.stepDown(err)
		return e.interval(cooldownIntervals), nil
	}
	return e.interval(1), nil
}

// campaign tries the lock once. On success it sets the leader connection's wait_timeout,
// acquires a term and starts the leader-only work; on any failure after the lock was taken it
// discards the connection, which gives the lock up.
func (e *MySQLElector) campaign(ctx context.Context) error {
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("campaign: get a connection: %w", err)
	}
	var (
		got sql.NullInt64
		id  int64
	)
	err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0), CONNECTION_ID()", e.cfg.LockName).Scan(&got, &id)
	switch {
	case err != nil:
		discard(conn) // an interrupted GET_LOCK may have taken the lock after all
		return fmt.Errorf("campaign: try lock %s: %w", e.cfg.LockName, err)
	case !got.Valid:
		discard(conn)
		return fmt.Errorf("campaign: try lock %s: GET_LOCK returned NULL", e.cfg.LockName)
	case got.Int64 != 1:
		_ = conn.Close() // another instance leads; this connection holds nothing: back to the pool
		return nil
	}

	// The session setting is made only now, so that follower connections go back to the pool
	// unchanged.
	q := fmt.Sprintf("SET SESSION wait_timeout = %d", int64(e.cfg.WaitTimeout/time.Second))
	if _, err := conn.ExecContext(ctx, q); err != nil {
		discard(conn)
		return fmt.Errorf("campaign: set wait_timeout: %w", err)
	}
	// The acquisition waits for the previous leader's fenced transactions; the pinned
	// connection is idle meanwhile and must not reach its wait_timeout.
	actx, cancel := context.WithTimeout(ctx, e.cfg.WaitTimeout/2)
	term, err := e.acquire(actx)
	cancel()
	if err != nil {
		discard(conn)
		return fmt.Errorf("campaign: %w", err)
	}
	e.conn = conn
	e.connID.Store(id)
	e.lead(ctx, term)
	return nil
}

// check asks the server, on the pinned connection, whether that connection still owns the
// lock, then renews leader_state. A check that fails or takes longer than the check timeout
// counts as lost leadership.
func (e *MySQLElector) check(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.checkTimeout())
	defer cancel()
	var held sql.NullBool
	err := e.conn.QueryRowContext(cctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", e.cfg.LockName).Scan(&held)
	if err != nil {
		return fmt.Errorf("check lock %s: %w", e.cfg.LockName, err)
	}
	if !held.Valid || !held.Bool {
		return fmt.Errorf("check lock %s: %w", e.cfg.LockName, errLockLost)
	}
	return e.touch(ctx, e.leading.term)
}

// stepDown ends a leadership that was lost: cancel the leader context at once, discard the
// connection, record the loss, and wait for OnElected to return.
func (e *MySQLElector) stepDown(reason error) {
	l := e.lose()
	e.release(false)
	e.settle(l, EventLost, reason)
}

// resign ends the leadership, if any, when the elector stops: like stepDown, but the lock is
// released explicitly first, so that a follower's next attempt succeeds even before the
// server has noticed the closed connection.
func (e *MySQLElector) resign() {
	if e.leading == nil {
		return
	}
	l := e.lose()
	e.release(true)
	e.settle(l, EventResigned, nil)
}

// release gives up the pinned connection, and with it the lock.
func (e *MySQLElector) release(graceful bool) {
	conn := e.conn
	e.conn = nil
	e.connID.Store(0)
	if graceful {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		if _, err := conn.ExecContext(ctx, "SELECT RELEASE_LOCK(?)", e.cfg.LockName); err != nil {
			e.log.Debug("release lock failed; discarding the connection frees it", "error", err)
		}
		cancel()
	}
	discard(conn)
}

// discard closes conn's physical connection instead of returning it to the pool: the only
// way to be sure a lock it may hold is gone.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close() // already closed by Raw; this only marks the sql.Conn done
}
