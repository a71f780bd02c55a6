package mysql

import (
	"database/sql"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// dbTime is how a time is stored: UTC, truncated (not rounded) to DATETIME(6)'s microseconds,
// so that what a caller gets back equals what it would read.
func dbTime(t time.Time) time.Time {
	return sqlgen.Micro(t)
}

// scanTime reads a DATETIME(6) column, which the driver (parseTime=true, loc=UTC) delivers as a
// time.Time in UTC.
func scanTime(src any) (time.Time, bool, error) {
	var t sql.NullTime
	err := t.Scan(src)
	return t.Time, t.Valid, err
}

// byKey makes an UPDATE of rows listed by primary key find them by it (sqlgen.Encoding.ByKey):
// on a small table the optimizer may scan the status index instead, locking the rows of
// concurrent transactions as it goes, and deadlock with them.
const byKey = "FORCE INDEX (PRIMARY)"

// upsert is MariaDB's clause that makes an INSERT replace the updated columns of the row whose
// unique key is taken; the key is the table's.
func upsert(_, updated []string) string {
	sets := make([]string, len(updated))
	for i, c := range updated {
		sets[i] = c + " = VALUES(" + c + ")"
	}
	return "ON DUPLICATE KEY UPDATE " + strings.Join(sets, ", ")
}

// executor implements store.Executor on a pool (Store) or on one transaction (tx): the
// methods whose SQL is MariaDB's own here, the others in sqlgen.Executor.
type executor struct {
	sqlgen.Executor
	q sqlgen.Conn
}

// on is the executor of q.
func on(q sqlgen.Conn) executor {
	return executor{Executor: shared.On(q, q), q: q}
}

// deleteFirst is MariaDB's DELETE of the rows that sel picks, in its order: DELETE takes ORDER
// BY and LIMIT.
func deleteFirst(table, _, sel string) string {
	return "DELETE FROM " + table + " " + sel
}

// shared is this driver's side of the statements both drivers share (package sqlgen).
var shared = sqlgen.Driver{
	Encoding: sqlgen.Encoding{Time: func(t time.Time) any { return dbTime(t) }, ScanTime: scanTime, ByKey: byKey},
	Dialect: sqlgen.Dialect{
		ForUpdate:   " FOR UPDATE",
		ShareLock:   " LOCK IN SHARE MODE",
		Greatest:    "GREATEST",
		PlusTTL:     "? + INTERVAL ttl_ms * 1000 MICROSECOND",
		DeleteFirst: deleteFirst,
		Upsert:      upsert,
	},
	MapErr: mapErr,
	Chunk:  batchChunk,
}
