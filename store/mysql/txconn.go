package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Round trips, not rows, are what a short transaction costs here: on a two-core machine a
// statement's round trip costs the client and the server about as much CPU as the row work of
// a small batch. txConn runs one transaction on a pinned connection and sends fewer of them:
//
//   - START TRANSACTION goes out with the transaction's first statement, not on its own (the
//     snapshot of REPEATABLE READ is taken at the first read either way);
//   - blind writes (audit rows, new leases: statements whose result nobody reads and whose only
//     failure is an error) are held and sent in front of the next statement, or in front of
//     COMMIT.
//
// Both ride on multiStatements=true. A held write that fails fails the statement it went out
// with (the server runs none of the rest), and the transaction rolls back as it would have.
// The error then names the held writes as well (foldedError).

// foldMaxBytes bounds a statement that others are folded into. The driver interpolates the
// arguments client-side only up to max_allowed_packet and falls back to a server-side prepared
// statement beyond it, which cannot hold several statements; large statements go alone.
const foldMaxBytes = 1 << 20

// rollbackTimeout bounds the ROLLBACK sent after a failed transaction, whose own context may
// have ended.
const rollbackTimeout = 5 * time.Second

// heldStmt is a blind write waiting for the next round trip.
type heldStmt struct {
	query string
	args  []any
	what  string // for errors: "insert audit events"
}

// txConn is the querier of one transaction: statements run on conn, START TRANSACTION and
// the held writes folded into the next statement sent.
type txConn struct {
	conn  *sql.Conn
	begun bool // START TRANSACTION was sent
	held  []heldStmt
	// sentWith names the held writes that went out with the last statement, for the error of
	// a QueryRowContext (whose *sql.Row cannot be wrapped): see annotate.
	sentWith []string
}

var _ querier = (*txConn)(nil)

// hold queues a blind write for the next round trip.
func (t *txConn) hold(what, query string, args []any) {
	t.held = append(t.held, heldStmt{query: query, args: args, what: what})
}

// fold returns query with START TRANSACTION (when not sent yet) and the held writes in front,
// and the names of the held writes it took.
func (t *txConn) fold(query string, args []any) (string, []any, []string) {
	if t.begun && len(t.held) == 0 {
		t.sentWith = nil
		return query, args, nil
	}
	var (
		b     strings.Builder
		all   []any
		whats []string
	)
	if !t.begun {
		b.WriteString("START TRANSACTION; ")
	}
	for _, h := range t.held {
		b.WriteString(h.query)
		b.WriteString("; ")
		all = append(all, h.args...)
		whats = append(whats, h.what)
	}
	b.WriteString(query)
	all = append(all, args...)
	t.begun, t.held, t.sentWith = true, nil, whats
	return b.String(), all, whats
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
	t.held = nil
	for _, h := range held {
		if _, err := t.conn.ExecContext(ctx, h.query, h.args...); err != nil {
			return fmt.Errorf("%s: %w", h.what, err)
		}
	}
	return nil
}

// ExecContext runs query with whatever is folded into it; the result is query's own (the
// driver reports the last statement's rows affected).
func (t *txConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := t.flushIfLarge(ctx, query, args); err != nil {
		return nil, err
	}
	q, a, whats := t.fold(query, args)
	res, err := t.conn.ExecContext(ctx, q, a...)
	return res, foldErr(err, whats)
}

// QueryContext runs query with whatever is folded into it; the rows are query's (the driver
// skips the result sets of the statements in front, which have no columns).
func (t *txConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := t.flushIfLarge(ctx, query, args); err != nil {
		return nil, err
	}
	q, a, whats := t.fold(query, args)
	rows, err := t.conn.QueryContext(ctx, q, a...)
	return rows, foldErr(err, whats)
}

// QueryRowContext is QueryContext for one row; Scan reports a held write's error. It always
// folds: its statements are small, and so are the held writes (audit rows, leases), far below
// the driver's limit on an interpolated statement.
func (t *txConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	q, a, _ := t.fold(query, args)
	return t.conn.QueryRowContext(ctx, q, a...)
}

// commit sends the held writes and COMMIT in one round trip. A transaction that sent nothing
// and holds nothing has nothing to commit.
func (t *txConn) commit(ctx context.Context) error {
	if !t.begun && len(t.held) == 0 {
		return nil
	}
	if err := t.flushIfLarge(ctx, "COMMIT", nil); err != nil {
		return err
	}
	q, a, whats := t.fold("COMMIT", nil)
	if _, err := t.conn.ExecContext(ctx, q, a...); err != nil {
		return foldErr(err, whats)
	}
	return nil
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

// execBlind runs a write whose result nobody reads. In a transaction it is held and sent with
// the next statement; its error, if any, is that statement's.
func (e executor) execBlind(ctx context.Context, what, query string, args []any) error {
	if t, ok := e.q.(*txConn); ok {
		t.hold(what, query, args)
		return nil
	}
	_, err := e.q.ExecContext(ctx, query, args...)
	return err
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
