package sqlgen

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of job dependencies and workflows that both dialects share
// (store.FlowExecutor).

// terminalStatuses are the job states a parent ends in, as arguments.
var terminalStatuses = []any{string(store.JobDone), string(store.JobDeadLetter), string(store.JobCancelled)}

// JobDepInsert inserts dependency rows, one multi-row INSERT per chunk, held for the
// transaction's next round trip where the driver holds writes.
func (e Executor) JobDepInsert(ctx context.Context, deps []store.JobDep) error {
	for chunk := range slices.Chunk(deps, max(e.d.Chunk, 1)) {
		args := make([]any, 0, 3*len(chunk))
		for _, d := range chunk {
			if !ASCIIID(d.JobID) || !ASCIIID(d.ParentID) {
				return fmt.Errorf("insert job dependencies: ids must be ASCII (%q, %q)", d.JobID, d.ParentID)
			}
			args = append(args, d.JobID, d.ParentID, d.Label)
		}
		q := "INSERT INTO job_deps (job_id, parent_id, label) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", len(chunk)), ", ")
		if err := e.d.ExecBlind(ctx, e.w, "insert job dependencies", q, args); err != nil {
			return fmt.Errorf("insert %d job dependencies: %w", len(chunk), err)
		}
	}
	return nil
}

// JobAddFlow sets flow bits on jobs by primary key, held like JobDepInsert.
func (e Executor) JobAddFlow(ctx context.Context, ids []string, flow store.JobFlow) error {
	for chunk := range slices.Chunk(DistinctIDs(ids), max(e.d.Chunk, 1)) {
		q := "UPDATE " + e.d.table("orchestrator_jobs") + " SET flow = flow | ? WHERE job_id IN (" + Placeholders(len(chunk)) + ")"
		if err := e.d.ExecBlind(ctx, e.w, "set job flow", q, append([]any{int(flow)}, Args(chunk)...)); err != nil {
			return fmt.Errorf("set the flow of %d jobs: %w", len(chunk), err)
		}
	}
	return nil
}

// JobParents reads the parents of ids with their status and, up to resultMax bytes each, their
// result (OCTET_LENGTH: bytes in both dialects).
func (e Executor) JobParents(ctx context.Context, ids []string, resultMax int) ([]store.JobParent, error) {
	result, args := "NULL", []any{}
	if resultMax > 0 {
		result, args = "CASE WHEN OCTET_LENGTH(p.result) <= ? THEN p.result END", []any{resultMax}
	}
	scan := func(row Scanner) (store.JobParent, error) {
		var (
			jp              store.JobParent
			status, lastErr sql.NullString
			raw             []byte
			size            sql.NullInt64
		)
		err := row.Scan(&jp.JobID, &jp.ParentID, &jp.Label, &status, &lastErr, &raw, &size)
		jp.Status, jp.LastError = store.JobStatus(status.String), lastErr.String
		jp.Result, jp.ResultBytes = NilIfEmpty(raw), int(size.Int64)
		return jp, err
	}
	out, err := chunked(DistinctIDs(ids), e.d.Chunk, func(chunk []string) ([]store.JobParent, error) {
		return query(ctx, e.d, e.r, scan, `SELECT d.job_id, d.parent_id, d.label, p.status, p.last_error, `+result+`,
			OCTET_LENGTH(p.result) FROM job_deps d LEFT JOIN orchestrator_jobs p ON p.job_id = d.parent_id
			WHERE d.job_id IN (`+Placeholders(len(chunk))+`) ORDER BY d.job_id, d.parent_id`, append(slices.Clone(args), Args(chunk)...)...)
	})
	if err != nil {
		return nil, fmt.Errorf("read job parents: %w", err)
	}
	return out, nil
}

// JobListWaitingReady lists the waiting jobs with parents that can be decided now (see
// store.FlowExecutor). The waiting jobs are found through idx_jobs_dispatch (status first),
// each one's parents by job_deps' primary key and theirs.
func (e Executor) JobListWaitingReady(ctx context.Context, p store.WaitingReadyParams) ([]string, error) {
	parents := "SELECT 1 FROM job_deps d JOIN orchestrator_jobs p ON p.job_id = d.parent_id WHERE d.job_id = c.job_id AND p.status "
	q := `SELECT c.job_id FROM orchestrator_jobs c WHERE c.status = ? AND (c.flow & ?) <> 0 AND (
		NOT EXISTS (` + parents + `NOT IN (?, ?, ?))
		OR ((c.flow & ?) = 0 AND EXISTS (` + parents + `IN (?, ?)))) ORDER BY c.job_id LIMIT ?`
	args := slices.Concat([]any{string(store.JobWaiting), int(store.FlowHasParents)}, terminalStatuses,
		[]any{int(store.FlowTolerant), string(store.JobDeadLetter), string(store.JobCancelled),
			ClampLimit(p.Limit, MaintenanceLimitDefault, MaintenanceLimitMax)})
	ids, err := QueryColumn[string](ctx, e.d, e.r, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list waiting jobs to resolve: %w", err)
	}
	return ids, nil
}

// JobDepsDeleteOrphans deletes the dependency rows of up to limit jobs that are gone. The
// derived table is materialised first, which MariaDB needs to delete from the table it reads.
func (e Executor) JobDepsDeleteOrphans(ctx context.Context, limit int) (int, error) {
	return e.d.ExecCount(ctx, e.w, "delete orphan job dependencies", `DELETE FROM job_deps WHERE job_id IN (
		SELECT job_id FROM (SELECT DISTINCT d.job_id FROM job_deps d LEFT JOIN orchestrator_jobs j ON j.job_id = d.job_id
		WHERE j.job_id IS NULL LIMIT ?) AS gone)`, MaintenanceLimit(limit))
}

const workflowColumns = "workflow_id, agent, status, spec, created_by, created_at, updated_at, finished_at"

// scanWorkflow reads a row of workflowColumns.
func (enc Encoding) scanWorkflow(row Scanner) (store.Workflow, error) {
	var (
		w      store.Workflow
		status string
		spec   []byte
	)
	err := row.Scan(&w.ID, &w.Agent, &status, &spec, &w.CreatedBy, enc.at(&w.CreatedAt), enc.at(&w.UpdatedAt),
		enc.atPtr(&w.FinishedAt))
	w.Status, w.Spec = store.WorkflowStatus(status), NilIfEmpty(spec)
	return w, err
}

// WorkflowInsert inserts the workflow row and its steps (one INSERT each).
func (e Executor) WorkflowInsert(ctx context.Context, w store.Workflow, steps []store.WorkflowStep) error {
	if !ASCIIID(w.ID) {
		return fmt.Errorf("insert workflow %q: the id must be ASCII", w.ID)
	}
	at := e.d.Time(w.CreatedAt)
	_, err := e.w.ExecContext(ctx, "INSERT INTO workflows ("+workflowColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
		w.ID, w.Agent, string(w.Status), string(w.Spec), w.CreatedBy, at, at)
	if err != nil {
		return fmt.Errorf("insert workflow %s: %w", w.ID, e.d.MapErr(err))
	}
	if len(steps) == 0 {
		return nil
	}
	args := make([]any, 0, 6*len(steps))
	for _, s := range steps {
		needs, _ := json.Marshal(nonNil(s.Needs)) // strings: it cannot fail
		args = append(args, w.ID, s.Step, s.JobID, string(needs), s.Phase, s.Position)
	}
	q := "INSERT INTO workflow_steps (workflow_id, step, job_id, needs, phase, position) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?), ", len(steps)), ", ")
	if err := e.d.ExecBlind(ctx, e.w, "insert workflow steps", q, args); err != nil {
		return fmt.Errorf("insert the steps of workflow %s: %w", w.ID, err)
	}
	return nil
}

// nonNil is s, or an empty slice for nil (which marshals as null).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// WorkflowGet returns one workflow or store.ErrNotFound.
func (e Executor) WorkflowGet(ctx context.Context, id string, forUpdate bool) (store.Workflow, error) {
	x := e
	if forUpdate {
		x.r = e.w // a locking read goes where the transaction's writes go
	}
	return getOne(ctx, x, "get workflow "+id, workflowColumns+" FROM workflows WHERE workflow_id", id, forUpdate, e.d.scanWorkflow)
}

// WorkflowSteps returns the steps of workflow id in request order, with their jobs' status.
func (e Executor) WorkflowSteps(ctx context.Context, id string) ([]store.WorkflowStepState, error) {
	if !ASCIIID(id) {
		return nil, nil
	}
	scan := func(row Scanner) (store.WorkflowStepState, error) {
		var (
			s      store.WorkflowStepState
			needs  []byte
			status sql.NullString
		)
		if err := row.Scan(&s.WorkflowID, &s.Step, &s.JobID, &needs, &s.Phase, &s.Position, &status); err != nil {
			return s, err
		}
		s.JobStatus = store.JobStatus(status.String)
		if err := json.Unmarshal(needs, &s.Needs); err != nil {
			return s, fmt.Errorf("workflow %s step %s: needs: %w", s.WorkflowID, s.Step, err)
		}
		return s, nil
	}
	steps, err := query(ctx, e.d, e.r, scan, `SELECT s.workflow_id, s.step, s.job_id, s.needs, s.phase, s.position, j.status
		FROM workflow_steps s LEFT JOIN orchestrator_jobs j ON j.job_id = s.job_id WHERE s.workflow_id = ? ORDER BY s.position`, id)
	return steps, wrapErr("read the steps of workflow "+id, err)
}

// WorkflowSetStatus is a compare-and-set of a workflow's status.
func (e Executor) WorkflowSetStatus(ctx context.Context, id string, from, to store.WorkflowStatus, now time.Time) error {
	if !ASCIIID(id) {
		return fmt.Errorf("set workflow status: %w", store.ErrNotFound)
	}
	var finished any
	if to.Terminal() {
		finished = e.d.Time(now)
	}
	st := Statement{SQL: "UPDATE workflows SET status = ?, updated_at = ?, finished_at = ? WHERE workflow_id = ? AND status = ?",
		Args: []any{string(to), e.d.Time(now), finished, id, string(from)}, Rows: 1}
	return e.compareAndSet(ctx, fmt.Sprintf("set workflow %s from %s to %s", id, from, to), st,
		"SELECT 1 FROM workflows WHERE workflow_id = ?", id)
}

// WorkflowListSettled lists running workflows whose steps' jobs have all ended, through
// idx_workflows_status and the steps' primary key.
func (e Executor) WorkflowListSettled(ctx context.Context, limit int) ([]string, error) {
	ids, err := QueryColumn[string](ctx, e.d, e.r, `SELECT w.workflow_id FROM workflows w WHERE w.status = ? AND NOT EXISTS (
		SELECT 1 FROM workflow_steps s JOIN orchestrator_jobs j ON j.job_id = s.job_id
		WHERE s.workflow_id = w.workflow_id AND j.status NOT IN (?, ?, ?)) ORDER BY w.created_at, w.workflow_id LIMIT ?`,
		slices.Concat([]any{string(store.WorkflowRunning)}, terminalStatuses, []any{MaintenanceLimit(limit)})...)
	return ids, wrapErr("list settled workflows", err)
}

// WorkflowList returns a page of workflows, newest first: (created_at DESC, workflow_id DESC).
func (e Executor) WorkflowList(ctx context.Context, p store.WorkflowListParams) ([]store.Workflow, error) {
	var f filter
	f.addIf("status = ?", string(p.Status))
	f.addIf("agent = ?", p.Agent)
	if !p.BeforeAt.IsZero() {
		at := e.d.Time(p.BeforeAt)
		f.add("(created_at < ? OR (created_at = ? AND workflow_id < ?))", at, at, p.BeforeID)
	}
	ws, err := query(ctx, e.d, e.r, e.d.scanWorkflow, "SELECT "+workflowColumns+" FROM workflows"+f.sql()+
		" ORDER BY created_at DESC, workflow_id DESC LIMIT ?", append(f.args, ClampLimit(p.Limit, ListLimitDefault, ListLimitMax))...)
	return ws, wrapErr("list workflows", err)
}

// WorkflowDeleteFinished deletes ended workflows that finished before before, with their steps.
func (e Executor) WorkflowDeleteFinished(ctx context.Context, before time.Time, limit int) (int, error) {
	ids, err := QueryColumn[string](ctx, e.d, e.r, `SELECT workflow_id FROM workflows WHERE status IN (?, ?, ?)
		AND finished_at < ? ORDER BY finished_at LIMIT ?`, string(store.WorkflowDone), string(store.WorkflowFailed),
		string(store.WorkflowCancelled), e.d.Time(before), MaintenanceLimit(limit))
	if err != nil || len(ids) == 0 {
		return 0, wrapErr("find finished workflows to delete", err)
	}
	in := " WHERE workflow_id IN (" + Placeholders(len(ids)) + ")"
	if _, err := e.w.ExecContext(ctx, "DELETE FROM workflow_steps"+in, Args(ids)...); err != nil {
		return 0, fmt.Errorf("delete workflow steps: %w", e.d.MapErr(err))
	}
	return e.d.ExecCount(ctx, e.w, "delete workflows", "DELETE FROM workflows"+in, Args(ids)...)
}
