package sqlgen

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of admission policies and of the audit log that both
// dialects share (store.AdmissionExecutor, store.AuditExecutor).

const admissionColumns = "agent, rate_per_sec, burst, max_pending, enabled, updated_at, max_gpu_memory_mb, max_gpus"

// AdmissionPolicyUpsert inserts or replaces the policy of p.Agent in one statement
// (Dialect.Upsert), with no read first, so concurrent writers of one agent cannot deadlock.
func (e Executor) AdmissionPolicyUpsert(ctx context.Context, p store.AdmissionPolicy) (store.AdmissionPolicy, error) {
	_, err := e.w.ExecContext(ctx, `INSERT INTO admission_policies (`+admissionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?) `+
		e.d.Upsert([]string{"agent"}, []string{"rate_per_sec", "burst", "max_pending", "enabled", "updated_at",
			"max_gpu_memory_mb", "max_gpus"}),
		p.Agent, p.RatePerSec, p.Burst, p.MaxPending, p.Enabled, e.d.Time(p.UpdatedAt), p.MaxGPUMemoryMB, p.MaxGPUs)
	if err != nil {
		return store.AdmissionPolicy{}, fmt.Errorf("set admission policy of %s: %w", p.Agent, e.d.MapErr(err))
	}
	p.UpdatedAt = Micro(p.UpdatedAt)
	return p, nil
}

// AdmissionPolicyGet returns the policy of agent, or store.ErrNotFound.
func (e Executor) AdmissionPolicyGet(ctx context.Context, agent string) (store.AdmissionPolicy, error) {
	row := e.r.QueryRowContext(ctx, "SELECT "+admissionColumns+" FROM admission_policies WHERE agent = ?", agent)
	p, err := e.d.scanAdmissionPolicy(row)
	if err != nil {
		return store.AdmissionPolicy{}, fmt.Errorf("get admission policy of %s: %w", agent, e.d.MapErr(err))
	}
	return p, nil
}

// AdmissionPolicyList returns every policy, ordered by agent.
func (e Executor) AdmissionPolicyList(ctx context.Context) ([]store.AdmissionPolicy, error) {
	out, err := query(ctx, e.d, e.r, e.d.scanAdmissionPolicy, "SELECT "+admissionColumns+" FROM admission_policies ORDER BY agent")
	if err != nil {
		return nil, fmt.Errorf("list admission policies: %w", err)
	}
	return out, nil
}

// AdmissionPolicyDelete deletes the policy of agent; store.ErrNotFound when it has none.
func (e Executor) AdmissionPolicyDelete(ctx context.Context, agent string) error {
	return e.execFound(ctx, "delete admission policy of "+agent, "DELETE FROM admission_policies WHERE agent = ?", agent)
}

func (enc Encoding) scanAdmissionPolicy(row Scanner) (store.AdmissionPolicy, error) {
	var p store.AdmissionPolicy
	err := row.Scan(&p.Agent, &p.RatePerSec, &p.Burst, &p.MaxPending, &p.Enabled, enc.at(&p.UpdatedAt),
		&p.MaxGPUMemoryMB, &p.MaxGPUs)
	return p, err
}

// AuditInsert appends the events with one multi-row INSERT per chunk. An empty JobID is
// stored as NULL. The IDs of the events are assigned by the database and not reported back.
// A Holder (a MariaDB transaction) sends the INSERT with its next statement.
func (e Executor) AuditInsert(ctx context.Context, events []store.AuditEvent) error {
	for chunk := range slices.Chunk(events, max(e.d.Chunk, 1)) {
		var q strings.Builder
		q.WriteString(`INSERT INTO orchestrator_audit
			(ts, event_type, job_id, lease_token, pool_id, actor, details) VALUES `)
		args := make([]any, 0, 7*len(chunk))
		for i, ev := range chunk {
			if !ASCIIID(ev.JobID) {
				return fmt.Errorf("insert audit events: job id %q is not ASCII", ev.JobID)
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, e.d.Time(ev.TS), ev.EventType, NullString(ev.JobID),
				ev.LeaseToken, ev.PoolID, ev.Actor, JSONArg(ev.Details))
		}
		if err := e.d.ExecBlind(ctx, e.w, "insert audit events", q.String(), args); err != nil {
			return fmt.Errorf("insert audit events: %w", err)
		}
	}
	return nil
}

// AuditList returns events with id > AfterID (of one job when JobID is set), in id order.
// Limit is clamped to 1..1000 (default 100).
func (e Executor) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEvent, error) {
	if !ASCIIID(p.JobID) {
		return nil, nil // no such job (see ASCIIID)
	}
	f := filter{where: []string{"id > ?"}, args: []any{p.AfterID}}
	f.addIf("job_id = ?", p.JobID)
	events, err := query(ctx, e.d, e.r, e.d.scanAudit, "SELECT "+auditColumns+" FROM orchestrator_audit"+f.sql()+
		" ORDER BY id LIMIT ?", append(f.args, ClampLimit(p.Limit, ListLimitDefault, ListLimitMax))...)
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	return events, nil
}

// auditColumns are the columns of orchestrator_audit, in the order scanAudit reads them.
const auditColumns = "id, ts, event_type, job_id, lease_token, pool_id, actor, details"

// scanAudit reads a row of auditColumns.
func (enc Encoding) scanAudit(row Scanner) (store.AuditEvent, error) {
	var (
		ev      store.AuditEvent
		jobID   sql.NullString
		details []byte
	)
	err := row.Scan(&ev.ID, enc.at(&ev.TS), &ev.EventType, &jobID, &ev.LeaseToken, &ev.PoolID, &ev.Actor, &details)
	ev.JobID, ev.Details = jobID.String, NilIfEmpty(details)
	return ev, err
}
