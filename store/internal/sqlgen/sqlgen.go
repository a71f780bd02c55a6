// Package sqlgen is the code that the MariaDB and SQLite drivers of store.Store share: the
// statements both dialects understand ("?" placeholders, CASE, IN, the same schema), the
// reading of rows into the store's models, and the Executor that runs them. Both drivers used
// to carry a copy of each; what differs between them (the encoding of times, a few clauses,
// the mapping of errors) each driver passes in as a Driver, and the statements that are its
// own stay in it.
//
// This file builds the compare-and-set UPDATE statements.
package sqlgen

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuorch/orchestrator/store"
)

// LastErrorMax is the byte capacity of last_error (MariaDB TEXT); both drivers store the same
// text.
const LastErrorMax = 65535

// WaitingReasonMax is the byte capacity of waiting_reason (VARCHAR(255) in MariaDB).
const WaitingReasonMax = 255

// Encoding is how a driver passes the values its dialect stores its own way.
type Encoding struct {
	// Time encodes a DATETIME(6) value.
	Time func(time.Time) any
	// ScanTime decodes a time column as the driver's rows deliver it; ok is false for NULL.
	ScanTime func(src any) (t time.Time, ok bool, err error)
	// ByKey is the index hint, after the table name, that makes an UPDATE find its rows by
	// primary key (MariaDB: FORCE INDEX (PRIMARY)). On a small table the optimizer may scan an
	// index on status instead, and an UPDATE locks every row it examines: rows of concurrent
	// transactions too, and they deadlock. Empty for none (SQLite has one writer).
	ByKey string
}

// table names table for an UPDATE by primary key.
func (enc Encoding) table(name string) string {
	if enc.ByKey == "" {
		return name
	}
	return name + " " + enc.ByKey
}

// nullTime encodes the zero time as NULL.
func (enc Encoding) nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return enc.Time(t)
}

// nullTimePtr encodes nil and the zero time as NULL.
func (enc Encoding) nullTimePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return enc.nullTime(*t)
}

// Assign is one "column = value" of an UPDATE's SET, or one "column = value" guard of its WHERE.
type Assign struct {
	Col string
	Val any
}

// Statement is one SQL statement with its arguments, and how many rows it must match.
type Statement struct {
	SQL  string
	Args []any
	Rows int
}

// JobSet returns the assignments of u: status and updated_at, then every field u sets.
func JobSet(u store.JobUpdate, enc Encoding) []Assign {
	set := []Assign{{"status", string(u.To)}, {"updated_at", enc.Time(u.Now)}}
	add := func(col string, v any) { set = append(set, Assign{col, v}) }
	if u.Attempts != nil {
		add("attempts", *u.Attempts)
	}
	if u.MaxAttempts != nil {
		add("max_attempts", *u.MaxAttempts)
	}
	if u.AvailableAt != nil {
		add("available_at", enc.Time(*u.AvailableAt))
	}
	if u.Enqueued != nil {
		add("enqueued", *u.Enqueued)
	}
	if u.OwnerPool != nil {
		add("owner_pool", *u.OwnerPool)
	}
	if u.WorkerID != nil {
		add("worker_id", *u.WorkerID)
	}
	if u.LeaseToken != nil {
		add("lease_token", *u.LeaseToken)
		node := ""
		if u.PlacedNode != nil {
			node = *u.PlacedNode
		}
		add("placed_node", node)
	}
	if u.StreamID != nil {
		add("stream_id", *u.StreamID)
	}
	if u.WaitingReason != nil {
		add("waiting_reason", TruncateUTF8(*u.WaitingReason, WaitingReasonMax))
	}
	if u.Result != nil {
		add("result", string(u.Result))
	}
	if u.LastError != nil {
		add("last_error", TruncateUTF8(*u.LastError, LastErrorMax))
	}
	if u.StartedAt != nil {
		add("started_at", enc.nullTime(*u.StartedAt))
	}
	if u.FinishedAt != nil {
		add("finished_at", enc.nullTime(*u.FinishedAt))
	}
	if u.LeaseExpiresAt != nil {
		add("lease_expires_at", enc.nullTime(*u.LeaseExpiresAt))
	}
	return set
}

// JobGuards returns the compare-and-set conditions of u besides its job_id: the status it must
// still have, and the attempts and worker it must still have when u asks.
func JobGuards(u store.JobUpdate) []Assign {
	where := []Assign{{"status", string(u.From)}}
	if u.ExpectAttempts != nil {
		where = append(where, Assign{"attempts", *u.ExpectAttempts})
	}
	if u.ExpectWorker != nil {
		where = append(where, Assign{"worker_id", *u.ExpectWorker})
	}
	return where
}

// JobUpdate is the single-row compare-and-set UPDATE of u.
func JobUpdate(u store.JobUpdate, enc Encoding) Statement {
	return update(enc.table("orchestrator_jobs"), "job_id", []row{{key: u.ID, set: JobSet(u, enc), where: JobGuards(u)}})
}

// JobUpdates turns compare-and-set writes of distinct jobs into as few UPDATE statements as it
// can: the writes are grouped by shape (the columns they set and check), and each group of up to
// chunk rows is one statement whose per-row values are CASE expressions on job_id (a value that
// all rows of the group share is a plain parameter). Each statement must match all its rows.
func JobUpdates(us []store.JobUpdate, enc Encoding, chunk int) ([]Statement, error) {
	rows := make([]row, len(us))
	for i, u := range us {
		rows[i] = row{key: u.ID, set: JobSet(u, enc), where: JobGuards(u)}
	}
	return batch(enc.table("orchestrator_jobs"), "job_id", rows, chunk)
}

// LeaseStatuses turns compare-and-set status changes of distinct leases into one UPDATE per
// (from, to, time) and chunk of tokens; a final status also sets ended_at.
func LeaseStatuses(us []store.LeaseStatusUpdate, enc Encoding, chunk int) ([]Statement, error) {
	rows := make([]row, len(us))
	for i, u := range us {
		var ended any
		if u.To != store.LeaseActive {
			ended = enc.Time(u.Now)
		}
		rows[i] = row{key: u.Token,
			set:   []Assign{{"status", string(u.To)}, {"ended_at", ended}},
			where: []Assign{{"status", string(u.From)}}}
	}
	return batch(enc.table("orchestrator_leases"), "token", rows, chunk)
}

// row is one keyed row's assignments and guards.
type row struct {
	key        string
	set, where []Assign
}

// shape is what rows must share to go into one statement: their columns, in order.
func (r row) shape() string {
	var b strings.Builder
	for _, a := range r.set {
		b.WriteString(a.Col)
		b.WriteByte(',')
	}
	b.WriteByte('|')
	for _, a := range r.where {
		b.WriteString(a.Col)
		b.WriteByte(',')
	}
	return b.String()
}

func batch(table, key string, rows []row, chunk int) ([]Statement, error) {
	seen := make(map[string]bool, len(rows))
	for _, r := range rows {
		if seen[r.key] {
			return nil, fmt.Errorf("update %s: %s %q appears twice in one batch", table, key, r.key)
		}
		seen[r.key] = true
	}
	// Group by shape, keeping each group in key order so that concurrent batches lock rows in
	// the same order.
	groups := map[string][]row{}
	var shapes []string
	for _, r := range rows {
		s := r.shape()
		if _, ok := groups[s]; !ok {
			shapes = append(shapes, s)
		}
		groups[s] = append(groups[s], r)
	}
	var out []Statement
	for _, s := range shapes {
		g := groups[s]
		slices.SortFunc(g, func(a, b row) int { return cmp.Compare(a.key, b.key) })
		for part := range slices.Chunk(g, max(chunk, 1)) {
			out = append(out, update(table, key, part))
		}
	}
	return out, nil
}

// update is one UPDATE of rows of the same shape.
func update(table, key string, rows []row) Statement {
	var (
		q    strings.Builder
		args []any
	)
	q.WriteString("UPDATE " + table + " SET ")
	for i := range rows[0].set {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(rows[0].set[i].Col + " = ")
		args = column(&q, args, key, rows, func(r row) any { return r.set[i].Val })
	}
	if len(rows) == 1 {
		q.WriteString(" WHERE " + key + " = ?")
		args = append(args, rows[0].key)
	} else {
		q.WriteString(" WHERE " + key + " IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(rows)), ", ") + ")")
		for _, r := range rows {
			args = append(args, r.key)
		}
	}
	for i := range rows[0].where {
		q.WriteString(" AND " + rows[0].where[i].Col + " = ")
		args = column(&q, args, key, rows, func(r row) any { return r.where[i].Val })
	}
	return Statement{SQL: q.String(), Args: args, Rows: len(rows)}
}

// column writes the value of one column for rows: a parameter when they all share it,
// otherwise a CASE on the key.
func column(q *strings.Builder, args []any, key string, rows []row, val func(row) any) []any {
	first := val(rows[0])
	if !slices.ContainsFunc(rows[1:], func(r row) bool { return val(r) != first }) {
		q.WriteString("?")
		return append(args, first)
	}
	q.WriteString("CASE " + key)
	for _, r := range rows {
		q.WriteString(" WHEN ? THEN ?")
		args = append(args, r.key, val(r))
	}
	q.WriteString(" END")
	return args
}

// TruncateUTF8 cuts s to at most n bytes without leaving half a rune at the end.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	// Drop the bytes of a rune cut in half (at most UTFMax-1 of them).
	for range utf8.UTFMax - 1 {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// ScheduledJob is the condition of a job the scheduler places (store.Job.Scheduled).
const ScheduledJob = `(gpu_memory_mb > 0 OR constraints IS NOT NULL OR pool_id <> '' OR model_id <> '')`

// Dispatchable is the FROM, WHERE, ORDER BY and LIMIT of store.JobExecutor.JobListDispatchable,
// for a limit the driver has clamped.
func (d *Driver) Dispatchable(p store.DispatchParams, limit int) (string, []any) {
	q := ` FROM orchestrator_jobs WHERE status = ? AND enqueued = 0 AND available_at <= ?`
	args := []any{string(store.JobPending), d.Time(p.Now)}
	if !p.SubmittedBy.IsZero() {
		q += ` AND (attempts > 0 OR created_at <= ?)`
		args = append(args, d.Time(p.SubmittedBy))
	}
	if p.Scheduled {
		q += ` AND (NOT ` + ScheduledJob + ` OR placed_node <> '')`
	}
	return q + ` ORDER BY available_at, job_id LIMIT ?`, append(args, limit)
}
