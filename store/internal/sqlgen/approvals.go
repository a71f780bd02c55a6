package sqlgen

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of approvals that both dialects share (store.ApprovalExecutor).

const (
	approvalPolicyColumns = "name, job_type, agent, min_gpus, min_gpu_memory_mb, two_key, ttl_ms, on_expiry, updated_by, updated_at"
	approvalColumns       = "job_id, agent, policy, required, status, on_expiry, expires_at, created_at, decided_at"
	decisionColumns       = "job_id, approver, decision, reason, decided_at"
)

// approvalReasonMax is the byte capacity of approval_decisions.reason (the API refuses longer).
const approvalReasonMax = 1024

// ApprovalPolicyList returns every policy, by name.
func (e Executor) ApprovalPolicyList(ctx context.Context) ([]store.ApprovalPolicy, error) {
	scan := func(row Scanner) (store.ApprovalPolicy, error) {
		var (
			p        store.ApprovalPolicy
			ttlMS    int64
			onExpiry string
		)
		err := row.Scan(&p.Name, &p.Type, &p.Agent, &p.MinGPUs, &p.MinGPUMemoryMB, &p.TwoKey, &ttlMS, &onExpiry,
			&p.UpdatedBy, e.d.at(&p.UpdatedAt))
		p.TTL, p.OnExpiry = time.Duration(ttlMS)*time.Millisecond, store.ApprovalExpiry(onExpiry)
		return p, err
	}
	ps, err := query(ctx, e.d, e.r, scan, "SELECT "+approvalPolicyColumns+" FROM approval_policies ORDER BY name")
	return ps, wrapErr("list approval policies", err)
}

// ApprovalPolicyUpsert writes one policy over the one of its name.
func (e Executor) ApprovalPolicyUpsert(ctx context.Context, p store.ApprovalPolicy) error {
	cols := strings.Split(approvalPolicyColumns, ", ")
	q := "INSERT INTO approval_policies (" + approvalPolicyColumns + ") VALUES (" + Placeholders(len(cols)) + ")" +
		" " + e.d.Upsert([]string{"name"}, cols[1:])
	_, err := e.w.ExecContext(ctx, q, p.Name, p.Type, p.Agent, p.MinGPUs, p.MinGPUMemoryMB, p.TwoKey, p.TTL.Milliseconds(),
		string(p.OnExpiry), p.UpdatedBy, e.d.Time(p.UpdatedAt))
	if err != nil {
		return fmt.Errorf("set approval policy %s: %w", p.Name, e.d.MapErr(err))
	}
	return nil
}

// ApprovalPolicyDelete deletes one policy by name.
func (e Executor) ApprovalPolicyDelete(ctx context.Context, name string) error {
	return e.execFound(ctx, "delete approval policy "+name, "DELETE FROM approval_policies WHERE name = ?", name)
}

// ApprovalInsert inserts requests with one multi-row INSERT per chunk.
func (e Executor) ApprovalInsert(ctx context.Context, rs []store.ApprovalRequest) error {
	for chunk := range slices.Chunk(rs, max(e.d.Chunk, 1)) {
		args := make([]any, 0, 9*len(chunk))
		for _, r := range chunk {
			if !ASCIIID(r.JobID) {
				return fmt.Errorf("insert approval requests: job id %q is not ASCII", r.JobID)
			}
			args = append(args, r.JobID, r.Agent, r.Policy, r.Required, string(r.Status), string(r.OnExpiry),
				e.d.nullTimePtr(r.ExpiresAt), e.d.Time(r.CreatedAt), e.d.nullTimePtr(r.DecidedAt))
		}
		q := "INSERT INTO approval_requests (" + approvalColumns + ") VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?), ", len(chunk)), ", ")
		if err := e.d.ExecBlind(ctx, e.w, "insert approval requests", q, args); err != nil {
			return fmt.Errorf("insert %d approval requests: %w", len(chunk), err)
		}
	}
	return nil
}

// scanApproval reads a row of approvalColumns, then extra.
func (enc Encoding) scanApproval(row Scanner, extra ...any) (store.ApprovalRequest, error) {
	var (
		r                store.ApprovalRequest
		status, onExpiry string
	)
	err := row.Scan(append([]any{&r.JobID, &r.Agent, &r.Policy, &r.Required, &status, &onExpiry, enc.atPtr(&r.ExpiresAt),
		enc.at(&r.CreatedAt), enc.atPtr(&r.DecidedAt)}, extra...)...)
	r.Status, r.OnExpiry = store.ApprovalStatus(status), store.ApprovalExpiry(onExpiry)
	return r, err
}

// ApprovalGet returns one job's request.
func (e Executor) ApprovalGet(ctx context.Context, jobID string, forUpdate bool) (store.ApprovalRequest, error) {
	x := e
	if forUpdate {
		x.r = e.w
	}
	return getOne(ctx, x, "get the approval request of job "+jobID, approvalColumns+" FROM approval_requests WHERE job_id",
		jobID, forUpdate, func(row Scanner) (store.ApprovalRequest, error) { return e.d.scanApproval(row) })
}

// ApprovalSetStatus is a compare-and-set of a request's status.
func (e Executor) ApprovalSetStatus(ctx context.Context, jobID string, from, to store.ApprovalStatus, now time.Time) error {
	if !ASCIIID(jobID) {
		return fmt.Errorf("set approval status: %w", store.ErrNotFound)
	}
	var decided any
	if !to.Open() {
		decided = e.d.Time(now)
	}
	st := Statement{SQL: "UPDATE approval_requests SET status = ?, expires_at = NULL, decided_at = ? WHERE job_id = ? AND status = ?",
		Args: []any{string(to), decided, jobID, string(from)}, Rows: 1}
	return e.compareAndSet(ctx, fmt.Sprintf("set the approval of job %s from %s to %s", jobID, from, to), st,
		"SELECT 1 FROM approval_requests WHERE job_id = ?", jobID)
}

// ApprovalDecide inserts one decision; the approver's second is the primary key taken.
func (e Executor) ApprovalDecide(ctx context.Context, d store.ApprovalDecision) error {
	if !ASCIIID(d.JobID) {
		return fmt.Errorf("record a decision: %w", store.ErrNotFound)
	}
	_, err := e.w.ExecContext(ctx, "INSERT INTO approval_decisions ("+decisionColumns+") VALUES (?, ?, ?, ?, ?)",
		d.JobID, d.Approver, d.Decision, TruncateUTF8(d.Reason, approvalReasonMax), e.d.Time(d.DecidedAt))
	if err != nil {
		return fmt.Errorf("record the decision of %s on job %s: %w", d.Approver, d.JobID, e.d.MapErr(err))
	}
	return nil
}

// ApprovalDecisions returns the decisions on ids, by job then time.
func (e Executor) ApprovalDecisions(ctx context.Context, ids []string) ([]store.ApprovalDecision, error) {
	scan := func(row Scanner) (store.ApprovalDecision, error) {
		var d store.ApprovalDecision
		err := row.Scan(&d.JobID, &d.Approver, &d.Decision, &d.Reason, e.d.at(&d.DecidedAt))
		return d, err
	}
	out, err := chunked(DistinctIDs(ids), e.d.Chunk, func(chunk []string) ([]store.ApprovalDecision, error) {
		return query(ctx, e.d, e.r, scan, "SELECT "+decisionColumns+" FROM approval_decisions WHERE job_id IN ("+
			Placeholders(len(chunk))+") ORDER BY job_id, decided_at, approver", Args(chunk)...)
	})
	return out, wrapErr("read approval decisions", err)
}

// ApprovalListOpen returns open requests, oldest first, with their jobs' types.
func (e Executor) ApprovalListOpen(ctx context.Context, p store.ApprovalListParams) ([]store.ApprovalRequest, error) {
	f := filter{where: []string{"r.status IN (?, ?)"}, args: []any{string(store.ApprovalWaiting), string(store.ApprovalEscalated)}}
	f.addIf("r.agent = ?", p.Agent)
	cols := "r." + strings.ReplaceAll(approvalColumns, ", ", ", r.")
	scan := func(row Scanner) (store.ApprovalRequest, error) {
		var typ string
		r, err := e.d.scanApproval(row, &typ)
		r.Type = typ
		return r, err
	}
	rs, err := query(ctx, e.d, e.r, scan, "SELECT "+cols+", COALESCE(j.type, '') FROM approval_requests r "+
		"LEFT JOIN orchestrator_jobs j ON j.job_id = r.job_id"+f.sql()+" ORDER BY r.created_at, r.job_id LIMIT ?",
		append(f.args, ClampLimit(p.Limit, ListLimitDefault, ListLimitMax))...)
	return rs, wrapErr("list open approval requests", err)
}

// ApprovalListExpired lists the waiting requests past their expiry through
// idx_approval_requests_status.
func (e Executor) ApprovalListExpired(ctx context.Context, now time.Time, limit int) ([]string, error) {
	ids, err := QueryColumn[string](ctx, e.d, e.r, `SELECT job_id FROM approval_requests WHERE status = ? AND expires_at <= ?
		ORDER BY expires_at LIMIT ?`, string(store.ApprovalWaiting), e.d.Time(now), MaintenanceLimit(limit))
	return ids, wrapErr("list expired approval requests", err)
}

// ApprovalDeleteOrphans deletes the requests and decisions of jobs that are gone.
func (e Executor) ApprovalDeleteOrphans(ctx context.Context, limit int) (int, error) {
	gone := `SELECT job_id FROM (SELECT r.job_id FROM approval_requests r LEFT JOIN orchestrator_jobs j ON j.job_id = r.job_id
		WHERE j.job_id IS NULL LIMIT ?) AS gone`
	ids, err := QueryColumn[string](ctx, e.d, e.r, gone, MaintenanceLimit(limit))
	if err != nil || len(ids) == 0 {
		return 0, wrapErr("find orphan approval requests", err)
	}
	in := " WHERE job_id IN (" + Placeholders(len(ids)) + ")"
	if _, err := e.w.ExecContext(ctx, "DELETE FROM approval_decisions"+in, Args(ids)...); err != nil {
		return 0, fmt.Errorf("delete orphan approval decisions: %w", e.d.MapErr(err))
	}
	return e.d.ExecCount(ctx, e.w, "delete orphan approval requests", "DELETE FROM approval_requests"+in, Args(ids)...)
}
