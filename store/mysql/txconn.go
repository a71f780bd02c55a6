package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// Round trips, not rows, are what a short transaction costs here: on a two-core machine a
// statement's round trip costs the client and the server about as much CPU as the row work of
// a small batch. txConn runs one transaction on a pinned connection and sends fewer of them:
//
//   - START TRANSACTION goes out with the transaction's first statement, not on its own (it
//     reads nothing: a read view is taken by the first read either way);
//   - blind writes (audit rows, new leases: statements whose result nobody reads and whose only
//     failure is an error) are held and sent in front of the next statement, or in front of
//     COMMIT;
//   - after DeferChecks, compare-and-set writes are held as well (deferred writes), and the
//     rows each matched are checked once they have gone out, from the driver's
//     AllRowsAffected. Only an Exec answers with those, so deferred writes go in front of the
//     next Exec, and in a round trip of their own ahead of a read or of COMMIT (which must not
//     run before they are checked). With Tx.LockJobsAndLeases, a claim that carries results
//     takes four round trips instead of seven.
//
// All ride on multiStatements=true. A held write that fails fails the statement it went out
// with (the server runs none of the rest), and the transaction rolls back as it would have.
// The error then names the held writes as well (foldedError). A deferred write that matched
// fewer rows than it must fails with store.ErrConflict, as it would have on its own.
//
// A server-side check (IF ROW_COUNT() <> n THEN SIGNAL ...) would let deferred writes ride
// with COMMIT too, but each such statement costs MariaDB more CPU than the round trip it saves
// (docs/performance.md).

// foldMaxBytes bounds a statement that others are folded into. The driver interpolates the
// arguments client-side only up to max_allowed_packet and falls back to a server-side prepared
// statement beyond it, which cannot hold several statements; large statements go alone.
const foldMaxBytes = 1 << 20

// rollbackTimeout bounds the ROLLBACK sent after a failed transaction, whose own context may
// have ended.
const rollbackTimeout = 5 * time.Second

// heldStmt is a write waiting for the next round trip.
type heldStmt struct {
	query string
	args  []any
	what  string // for errors: "insert audit events"
	rows  int    // > 0: a deferred compare-and-set write, which must match exactly rows rows
}

// rowsCheck is a deferred write's check: statement at of a round trip must match rows rows.
type rowsCheck struct {
	at   int
	rows int
	what string
}

// packet is what one round trip sends: statements separated by "; ".
type packet struct {
	query  string
	args   []any
	whats  []string    // the held writes in it, for errors
	checks []rowsCheck // the deferred writes in it
}

// txConn is the connection (sqlgen.Conn) of one transaction: statements run on conn, START
// TRANSACTION and the held writes folded into the next statement sent.
type txConn struct {
	conn  *sql.Conn
	begun bool // START TRANSACTION was sent
	held  []heldStmt
	// deferChecks: compare-and-set writes are held too (DeferChecks).
	deferChecks bool
	// err is the failure of deferred writes sent ahead of a QueryRowContext, whose *sql.Row
	// cannot carry it: it fails every later statement and the transaction.
	err error
	// sentWith names the held writes that went out with the last statement, for the error of
	// a QueryRowContext (whose *sql.Row cannot be wrapped): see annotate.
	sentWith []string
}

var (
	_ sqlgen.Conn     = (*txConn)(nil)
	_ sqlgen.Holder   = (*txConn)(nil)
	_ sqlgen.Deferrer = (*txConn)(nil)
)

// Hold queues a blind write for the next round trip (sqlgen.Holder).
func (t *txConn) Hold(what, query string, args []any) {
	t.held = append(t.held, heldStmt{query: query, args: args, what: what})
}

// DeferWrite holds a compare-and-set write that must match exactly rows rows, when the
// transaction defers its checks (sqlgen.Deferrer); false when the caller must run it now.
func (t *txConn) DeferWrite(what, query string, args []any, rows int) bool {
	if !t.deferChecks || rows <= 0 {
		return false
	}
	t.held = append(t.held, heldStmt{query: query, args: args, what: what, rows: rows})
	return true
}

// deferred reports whether a deferred write is held.
func (t *txConn) deferred() bool {
	return slices.ContainsFunc(t.held, func(h heldStmt) bool { return h.rows > 0 })
}

// fold returns the packet of query with START TRANSACTION (when not sent yet) and the held
// writes in front; an empty query sends only those.
func (t *txConn) fold(query string, args []any) packet {
	if t.begun && len(t.held) == 0 {
		t.sentWith = nil
		return packet{query: query, args: args}
	}
	var (
		b  strings.Builder
		p  packet
		at int // the index of the next statement in the packet
	)
	add := func(q string) {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(q)
		at++
	}
	if !t.begun {
		add("START TRANSACTION")
	}
	for _, h := range t.held {
		if h.rows > 0 {
			p.checks = append(p.checks, rowsCheck{at: at, rows: h.rows, what: h.what})
		}
		add(h.query)
		p.args = append(p.args, h.args...)
		p.whats = append(p.whats, h.what)
	}
	if query != "" {
		add(query)
		p.args = append(p.args, args...)
	}
	p.query = b.String()
	t.begun, t.held, t.sentWith = true, nil, p.whats
	return p
}

// exec sends p with Exec. With deferred writes in it, it goes to the driver itself, whose
// result has the rows each statement matched, and those are checked.
func (t *txConn) exec(ctx context.Context, p packet) (sql.Result, error) {
	if len(p.checks) == 0 {
		res, err := t.conn.ExecContext(ctx, p.query, p.args...)
		return res, foldErr(err, p.whats)
	}
	var res driver.Result
	err := t.conn.Raw(func(dc any) error {
		ex, ok := dc.(driver.ExecerContext)
		if !ok {
			return fmt.Errorf("the mysql driver's connection %T cannot exec", dc)
		}
		named, err := namedValues(dc, p.args)
		if err != nil {
			return err
		}
		res, err = ex.ExecContext(ctx, p.query, named)
		return err
	})
	if err != nil {
		return nil, foldErr(err, p.whats)
	}
	all, ok := res.(mysql.Result)
	if !ok {
		return nil, fmt.Errorf("the mysql driver's result %T has no rows per statement", res)
	}
	matched := all.AllRowsAffected()
	for _, c := range p.checks {
		if c.at >= len(matched) {
			return nil, fmt.Errorf("%s: the server answered %d statements, not %d", c.what, len(matched), c.at+1)
		}
		if n := matched[c.at]; n != int64(c.rows) {
			return nil, fmt.Errorf("%s: %d of %d rows still matched: %w", c.what, n, c.rows, store.ErrConflict)
		}
	}
	return res, nil
}

// namedValues converts args for the driver connection dc as database/sql would.
func namedValues(dc any, args []any) ([]driver.NamedValue, error) {
	checker, _ := dc.(driver.NamedValueChecker)
	out := make([]driver.NamedValue, len(args))
	for i, a := range args {
		nv := driver.NamedValue{Ordinal: i + 1, Value: a}
		err := driver.ErrSkip
		if checker != nil {
			err = checker.CheckNamedValue(&nv)
		}
		if errors.Is(err, driver.ErrSkip) {
			nv.Value, err = driver.DefaultParameterConverter.ConvertValue(a)
		}
		if err != nil {
			return nil, fmt.Errorf("argument %d: %w", i+1, err)
		}
		out[i] = nv
	}
	return out, nil
}

// sendDeferred sends the held writes in a round trip of their own when a deferred write is
// among them: ahead of a read or of COMMIT, which must not carry them.
func (t *txConn) sendDeferred(ctx context.Context) error {
	if !t.deferred() {
		return nil
	}
	_, err := t.exec(ctx, t.fold("", nil))
	return err
}

// flushIfLarge sends what would be folded into query in a round trip of its own when the
// whole would be large. With nothing to fold (the common case once a transaction has begun) it
// does not size anything.
func (t *txConn) flushIfLarge(ctx context.Context, query string, args []any) error {
	if t.begun && len(t.held) == 0 {
		return nil
	}
	n := stmtBytes(query, args)
	for _, h := range t.held {
		n += stmtBytes(h.query, h.args)
	}
	if n <= foldMaxBytes {
		return nil
	}
	return t.flush(ctx)
}

// flush sends START TRANSACTION and the held writes, each in a round trip of its own.
func (t *txConn) flush(ctx context.Context) error {
	if !t.begun {
		if _, err := t.conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		t.begun = true
	}
	held := t.held
	for _, h := range held {
		t.held = []heldStmt{h}
		if _, err := t.exec(ctx, t.fold("", nil)); err != nil {
			return fmt.Errorf("%s: %w", h.what, err)
		}
	}
	return nil
}

// ExecContext runs query with whatever is folded into it; the result is query's own (the
// driver reports the last statement's rows affected).
func (t *txConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if t.err != nil {
		return nil, t.err
	}
	if err := t.flushIfLarge(ctx, query, args); err != nil {
		return nil, unavailable(err)
	}
	res, err := t.exec(ctx, t.fold(query, args))
	return res, unavailable(err)
}

// QueryContext runs query with whatever is folded into it; the rows are query's (the driver
// skips the result sets of the statements in front, which have no columns).
func (t *txConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if t.err != nil {
		return nil, t.err
	}
	if err := t.sendDeferred(ctx); err != nil {
		return nil, unavailable(err)
	}
	if err := t.flushIfLarge(ctx, query, args); err != nil {
		return nil, unavailable(err)
	}
	p := t.fold(query, args)
	rows, err := t.conn.QueryContext(ctx, p.query, p.args...)
	return rows, unavailable(foldErr(err, p.whats))
}

// QueryRowContext is QueryContext for one row; Scan reports a held write's error. It always
// folds: its statements are small, and so are the held writes (audit rows, leases), far below
// the driver's limit on an interpolated statement. The failure of deferred writes sent ahead
// of it cannot reach the *sql.Row: it fails the transaction instead (t.err).
func (t *txConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if t.err == nil {
		t.err = t.sendDeferred(ctx)
	}
	p := t.fold(query, args)
	return t.conn.QueryRowContext(ctx, p.query, p.args...)
}

// commit sends the held writes and COMMIT in one round trip (two with deferred writes among
// them: they are checked before COMMIT goes). A transaction that sent nothing and holds
// nothing has nothing to commit.
func (t *txConn) commit(ctx context.Context) error {
	if t.err != nil {
		return t.err
	}
	if !t.begun && len(t.held) == 0 {
		return nil
	}
	if err := t.sendDeferred(ctx); err != nil {
		return err
	}
	if err := t.flushIfLarge(ctx, "COMMIT", nil); err != nil {
		return err
	}
	_, err := t.exec(ctx, t.fold("COMMIT", nil))
	return err
}

// rollback ends a transaction that failed; false when the connection may still be inside it
// (the ROLLBACK failed), and must not go back to the pool.
func (t *txConn) rollback() bool {
	t.held = nil
	if !t.begun {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_, err := t.conn.ExecContext(ctx, "ROLLBACK")
	return err == nil
}

// release returns the connection to the pool, or closes it when keep is false.
func (t *txConn) release(keep bool) {
	if !keep {
		_ = t.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = t.conn.Close()
}

// foldedError is the error of a statement that went out with held writes in front: the server
// stopped at the first statement that failed, which may be one of them.
type foldedError struct {
	err   error
	whats []string
}

func (e *foldedError) Error() string {
	return fmt.Sprintf("%v (in the statement or in the writes sent with it: %s)", e.err, strings.Join(e.whats, ", "))
}

func (e *foldedError) Unwrap() error { return e.err }

// annotate names the held writes sent with the last statement in err, a server error that came
// back without them (through a *sql.Row).
func (t *txConn) annotate(err error) error {
	var (
		fe *foldedError
		me *mysql.MySQLError
	)
	if len(t.sentWith) == 0 || errors.As(err, &fe) || !errors.As(err, &me) {
		return err
	}
	return foldErr(err, t.sentWith)
}

func foldErr(err error, whats []string) error {
	if err == nil || len(whats) == 0 {
		return err
	}
	return &foldedError{err: err, whats: whats}
}

// stmtBytes estimates the size of query once its arguments are interpolated.
func stmtBytes(query string, args []any) int {
	n := len(query)
	for _, a := range args {
		switch v := a.(type) {
		case string:
			n += 2 * len(v) // escaping may double it
		case []byte:
			n += 2*len(v) + 3
		default:
			n += 32
		}
	}
	return n
}
