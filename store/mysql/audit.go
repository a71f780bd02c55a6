package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// AuditInsert appends the events with one multi-row INSERT per 500 rows. An empty JobID is
// stored as NULL. The IDs of the events are assigned by the database and not reported back.
// In a transaction the INSERT goes out with the next statement (execBlind).
func (e executor) AuditInsert(ctx context.Context, events []store.AuditEvent) error {
	for chunk := range slices.Chunk(events, batchChunk) {
		var q strings.Builder
		q.WriteString(`INSERT INTO orchestrator_audit
			(ts, event_type, job_id, lease_token, pool_id, actor, details) VALUES `)
		args := make([]any, 0, 7*len(chunk))
		for i, ev := range chunk {
			if !sqlgen.ASCIIID(ev.JobID) {
				return fmt.Errorf("insert audit events: job id %q is not ASCII", ev.JobID)
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, dbTime(ev.TS), ev.EventType, sqlgen.NullString(ev.JobID),
				ev.LeaseToken, ev.PoolID, ev.Actor, sqlgen.JSONArg(ev.Details))
		}
		if err := e.execBlind(ctx, "insert audit events", q.String(), args); err != nil {
			return fmt.Errorf("insert audit events: %w", mapErr(err))
		}
	}
	return nil
}

// AuditList returns events with id > AfterID (of one job when JobID is set), in id order.
// Limit is clamped to 1..1000 (default 100).
func (e executor) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEvent, error) {
	if !sqlgen.ASCIIID(p.JobID) {
		return nil, nil // no such job (see asciiID)
	}
	q := `SELECT id, ts, event_type, job_id, lease_token, pool_id, actor, details
		FROM orchestrator_audit WHERE id > ?`
	args := []any{p.AfterID}
	if p.JobID != "" {
		q += " AND job_id = ?"
		args = append(args, p.JobID)
	}
	q += " ORDER BY id LIMIT ?"
	args = append(args, sqlgen.ClampLimit(p.Limit, listLimitDefault, listLimitMax))
	rows, err := e.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", mapErr(err))
	}
	defer rows.Close()
	var events []store.AuditEvent
	for rows.Next() {
		var (
			ev      store.AuditEvent
			jobID   sql.NullString
			details []byte
		)
		if err := rows.Scan(&ev.ID, &ev.TS, &ev.EventType, &jobID, &ev.LeaseToken, &ev.PoolID,
			&ev.Actor, &details); err != nil {
			return nil, fmt.Errorf("list audit events: %w", err)
		}
		ev.JobID = jobID.String
		ev.Details = sqlgen.NilIfEmpty(details)
		events = append(events, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit events: %w", mapErr(err))
	}
	return events, nil
}
