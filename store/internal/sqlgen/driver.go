package sqlgen

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds what a driver hands this package: its connections, how its dialect differs,
// and the Executor that runs the statements both dialects share on them.

// Limits of list queries, the same in both drivers.
const (
	ListLimitDefault     = 100
	ListLimitMax         = 1000
	DispatchLimitDefault = 100
	DispatchLimitMax     = 10000
	// MaintenanceLimitDefault and MaintenanceLimitMax are small on purpose: each maintenance
	// statement locks (MariaDB) or holds the write lock (SQLite) for at most this many rows, so
	// a maintenance pass never stalls the hot path.
	MaintenanceLimitDefault = 100
	MaintenanceLimitMax     = 5000
)

// Execer is what *sql.DB and *sql.Tx have in common for writes.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Reader is what *sql.DB and *sql.Tx have in common for reads of many rows.
type Reader interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Querier is an Execer that also reads one row: what a single-row compare-and-set needs to tell
// a missing row from one that moved on.
type Querier interface {
	Execer
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Conn is what *sql.DB and *sql.Tx have in common, and what each driver's wrappers of them
// (retries, error marking, held writes) implement.
type Conn interface {
	Querier
	Reader
}

// Deferrer is a Querier that may hold a compare-and-set write and check it later, with its next
// statement (store.Tx.DeferChecks): DeferWrite reports whether it took the write, which must
// match exactly rows rows.
type Deferrer interface {
	DeferWrite(what, query string, args []any, rows int) bool
}

// Holder is a connection that holds a write whose result nobody reads (new rows of a
// transaction) and sends it with its next statement, whose error is then the write's too.
type Holder interface {
	Hold(what, query string, args []any)
}

// Dialect is the SQL text that differs between the drivers in statements otherwise shared.
type Dialect struct {
	// ForUpdate ends a read that locks its rows until the transaction ends (MariaDB:
	// " FOR UPDATE"). Empty where a transaction holds the whole database already (SQLite).
	ForUpdate string
	// ShareLock ends a read that takes a shared lock until the transaction ends, so that it
	// sees the latest committed row (MariaDB: " LOCK IN SHARE MODE"); empty as ForUpdate.
	ShareLock string
	// Greatest names the function of the larger of two values (GREATEST, or SQLite's MAX).
	Greatest string
	// PlusTTL is the expression of a time parameter plus a lease's ttl_ms, in the encoding of
	// times (MariaDB: an INTERVAL; SQLite: microseconds).
	PlusTTL string
	// DeleteFirst is the DELETE FROM table of the rows that sel picks ("WHERE … ORDER BY …
	// LIMIT ?"), whose primary key is key (MariaDB deletes in that order itself; SQLite picks
	// the keys in a subquery).
	DeleteFirst func(table, key, sel string) string
	// Upsert is the clause that makes an INSERT of cols replace the updated columns of the row
	// whose unique keys are taken (ON DUPLICATE KEY UPDATE, ON CONFLICT DO UPDATE).
	Upsert func(keys, updated []string) string
}

// Driver is one driver's side of the statements the drivers share: how it encodes values and
// spells what its dialect spells its own way, how it maps its errors onto the store's, and how
// many rows one statement carries.
type Driver struct {
	Encoding
	Dialect
	// MapErr turns a driver error into store.ErrConflict, store.ErrNotFound or itself.
	MapErr func(error) error
	// Chunk bounds the rows or ids of one statement (IN lists, multi-row inserts).
	Chunk int
}

// Executor implements the methods of store.Executor whose statements both drivers share, on
// one driver's connections. A driver embeds it and declares the methods whose SQL is its own.
type Executor struct {
	d *Driver
	// r serves plain reads; w writes, and the reads that must see them at once. They are one
	// pool or one transaction in MariaDB; outside a transaction SQLite reads from a pool of
	// read-only connections and writes through its one writer.
	r, w Conn
}

// On is the Executor of d on r (reads) and w (writes).
func (d *Driver) On(r, w Conn) Executor {
	return Executor{d: d, r: r, w: w}
}

// ExecCount runs a write on x and returns how many rows it changed; what names it in errors.
func (d *Driver) ExecCount(ctx context.Context, x Execer, what, q string, args ...any) (int, error) {
	res, err := x.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, d.MapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return int(n), nil
}

// ExecBlind runs a write whose result nobody reads on x (what names it in errors): a Holder
// holds it for its next round trip. The error is mapped.
func (d *Driver) ExecBlind(ctx context.Context, x Execer, what, q string, args []any) error {
	if h, ok := x.(Holder); ok {
		h.Hold(what, q, args)
		return nil
	}
	_, err := x.ExecContext(ctx, q, args...)
	return d.MapErr(err)
}

// execFound runs a write of one row by key; ErrNotFound when it matched none.
func (e Executor) execFound(ctx context.Context, what, q string, args ...any) error {
	n, err := e.d.ExecCount(ctx, e.w, what, q, args...)
	if err == nil && n == 0 {
		err = fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return err
}

// chunked runs read on each chunk of ids in turn and returns all it read.
func chunked[T any](ids []string, size int, read func([]string) ([]T, error)) ([]T, error) {
	var out []T
	for chunk := range slices.Chunk(ids, max(size, 1)) {
		got, err := read(chunk)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}
