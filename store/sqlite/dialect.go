package sqlite

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// dbTime is how a time is written: microseconds since the Unix epoch. Like MariaDB's
// DATETIME(6) it truncates (not rounds), so that what a caller gets back equals what it would
// read.
func dbTime(t time.Time) int64 {
	return t.UnixMicro()
}

// scanTime reads a time column: INTEGER microseconds since the Unix epoch, or NULL.
func scanTime(src any) (time.Time, bool, error) {
	switch v := src.(type) {
	case nil:
		return time.Time{}, false, nil
	case int64:
		return time.UnixMicro(v).UTC(), true, nil
	default:
		return time.Time{}, false, fmt.Errorf("scan time: want microseconds, got %T", src)
	}
}

// upsert is SQLite's clause that makes an INSERT replace the updated columns of the row whose
// keys are taken.
func upsert(keys, updated []string) string {
	sets := make([]string, len(updated))
	for i, c := range updated {
		sets[i] = c + " = excluded." + c
	}
	return "ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE SET " + strings.Join(sets, ", ")
}

// deleteFirst is SQLite's DELETE of the rows that sel picks, in its order: a subquery picks
// their keys, as SQLite's DELETE takes no ORDER BY or LIMIT (unless built with them).
func deleteFirst(table, key, sel string) string {
	return "DELETE FROM " + table + " WHERE " + key + " IN (SELECT " + key + " FROM " + table + " " + sel + ")"
}

// executor implements store.Executor: the methods whose SQL is SQLite's own here, the others
// in sqlgen.Executor. On the Store, r is the read-only pool and w the writer connection; in a
// transaction both are the transaction.
type executor struct {
	sqlgen.Executor
	r, w sqlgen.Conn
}

// on is the executor that reads from r and writes through w.
func on(r, w sqlgen.Conn) executor {
	return executor{Executor: shared.On(r, w), r: r, w: w}
}

// shared is this driver's side of the statements both drivers share (package sqlgen). A
// transaction holds the database's write lock from its first statement (BEGIN IMMEDIATE), so
// reads need no locking clause.
var shared = sqlgen.Driver{
	Encoding: sqlgen.Encoding{Time: func(t time.Time) any { return dbTime(t) }, ScanTime: scanTime},
	Dialect: sqlgen.Dialect{
		Greatest:    "MAX",
		PlusTTL:     "? + ttl_ms * 1000",
		DeleteFirst: deleteFirst,
		Upsert:      upsert,
	},
	MapErr: mapErr,
	Chunk:  batchChunk,
}
