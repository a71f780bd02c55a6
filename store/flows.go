package store

import (
	"context"
	"encoding/json"
	"time"
)

// JobFlow says what a job takes part in beyond its own run, as bits of orchestrator_jobs.flow
// (db/migrations/mysql/017_flows.up.sql). A plain job has none, and no statement of its
// submit, claim or completion looks at job_deps or the approvals for it: only the bits set
// send the engine there.
type JobFlow uint8

// Job flow bits.
const (
	// FlowHasParents: the job has job_deps rows of its own; it waits for those parents (a
	// fan-out parent: for its children), and a claim of it hands the worker their results.
	FlowHasParents JobFlow = 1 << iota
	// FlowHasDependents: other jobs wait for this one; its end wakes the resolver.
	FlowHasDependents
	// FlowFanOut: a fan-out parent. It never runs: it waits for its children and ends done
	// (every child done) or dead_letter, with their results by node as its result.
	FlowFanOut
	// FlowTolerant: the job runs once its parents have ended, whether they succeeded or not
	// (on_parent_failure: run); a fan-out parent waits for every child however the others end
	// (strategy: continue). Without it, the first parent that fails cancels the job, and the
	// first child that fails cancels the other children (fail_fast).
	FlowTolerant
	// FlowApproval: the job has an approval request (store.ApprovalRequest).
	FlowApproval
)

// Has reports whether every bit of b is set.
func (f JobFlow) Has(b JobFlow) bool { return f&b == b }

// JobDep is one row of job_deps: JobID waits for ParentID. Label is the parent's step name in
// a workflow, the child's node for a fan-out parent's row, "" otherwise.
type JobDep struct {
	JobID    string
	ParentID string
	Label    string
}

// JobParent is one parent of a waiting job with what the resolver and a claim need of it.
type JobParent struct {
	JobDep
	// Status is the parent's status; "" when its row is gone (retention deleted it: it had
	// ended, how is no longer known).
	Status    JobStatus
	LastError string
	// Result is the parent's result when asked for and at most the size asked (nil
	// otherwise); ResultBytes is its whole size.
	Result      json.RawMessage
	ResultBytes int
}

// Ended reports whether the parent has ended (or its row is gone).
func (p JobParent) Ended() bool { return p.Status == "" || p.Status.Terminal() }

// Succeeded reports whether the parent ended done.
func (p JobParent) Succeeded() bool { return p.Status == JobDone }

// WorkflowStatus is the state of a workflow.
type WorkflowStatus string

// Workflow states: running until every step's job has ended; then done (all done) or failed
// (any step's job dead-lettered or cancelled); cancelled when cancelled as a whole.
const (
	WorkflowRunning   WorkflowStatus = "running"
	WorkflowDone      WorkflowStatus = "done"
	WorkflowFailed    WorkflowStatus = "failed"
	WorkflowCancelled WorkflowStatus = "cancelled"
)

// Terminal reports whether the workflow has ended.
func (s WorkflowStatus) Terminal() bool { return s != WorkflowRunning }

// WorkflowAuditPrefix starts the job_id of a workflow's audit rows: "wf/<workflow id>". A
// '/' is in no job id, so no job's events mix with a workflow's, and the (job_id, id) index of
// the audit table serves a workflow's rows as it serves a job's.
const WorkflowAuditPrefix = "wf/"

// WorkflowAuditKey is the job_id of workflow id's audit rows.
func WorkflowAuditKey(id string) string { return WorkflowAuditPrefix + id }

// Workflow is one row of workflows.
type Workflow struct {
	ID     string
	Agent  string
	Status WorkflowStatus
	// Spec is the request as accepted (JSON), shown by GET /workflows/{id}.
	Spec       json.RawMessage
	CreatedBy  string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt *time.Time
}

// WorkflowStep is one row of workflow_steps: a step, the job that runs it, the steps it needs.
type WorkflowStep struct {
	WorkflowID string
	Step       string
	JobID      string
	Needs      []string
	// Phase is the step's phase (0-based) in a workflow of phases; 0 otherwise.
	Phase int
	// Position is the step's place in the request.
	Position int
}

// WorkflowStepState is a step with the state of its job (JobStatus "" when the job row is
// gone).
type WorkflowStepState struct {
	WorkflowStep
	JobStatus JobStatus
}

// WaitingReadyParams selects the waiting jobs with parents that the resolver must decide on now.
type WaitingReadyParams struct {
	Limit int
}

// WorkflowListParams pages GET /workflows, newest first.
type WorkflowListParams struct {
	Status WorkflowStatus // empty: any
	Agent  string         // empty: any
	// Before is the keyset cursor: the created_at and id of the last workflow of the previous
	// page (zero: the first page).
	BeforeAt time.Time
	BeforeID string
	Limit    int
}

// FlowExecutor is the operations on job_deps, workflows and workflow_steps, and the flow bits
// of jobs.
type FlowExecutor interface {
	// JobDepInsert inserts dependency rows (one multi-row insert per chunk); a row that exists
	// is ErrConflict.
	JobDepInsert(ctx context.Context, deps []JobDep) error
	// JobAddFlow sets the bits of flow on the existing jobs among ids (flow = flow | bits),
	// leaving every other column, updated_at included, as it is.
	JobAddFlow(ctx context.Context, ids []string, flow JobFlow) error
	// JobParents returns the parents of the jobs among ids, by (job_id, parent_id), with
	// each parent's status. resultMax > 0 reads each parent's result when it is at most
	// resultMax bytes (larger ones come without, ResultBytes says their size); 0 reads none.
	JobParents(ctx context.Context, ids []string, resultMax int) ([]JobParent, error)
	// JobListWaitingReady returns the waiting jobs with parents that can be decided now, by
	// job_id: those whose parents have all ended (or are gone), and those that are not
	// FlowTolerant with a parent that ended dead_letter or cancelled.
	JobListWaitingReady(ctx context.Context, p WaitingReadyParams) ([]string, error)
	// JobDepsDeleteOrphans deletes up to limit job_deps rows whose job is gone (retention
	// deleted it) and returns how many.
	JobDepsDeleteOrphans(ctx context.Context, limit int) (int, error)

	// WorkflowInsert inserts a workflow and its steps; ErrConflict when its id is taken.
	WorkflowInsert(ctx context.Context, w Workflow, steps []WorkflowStep) error
	// WorkflowGet returns one workflow (locked for the transaction when forUpdate) or
	// ErrNotFound.
	WorkflowGet(ctx context.Context, id string, forUpdate bool) (Workflow, error)
	// WorkflowSteps returns a workflow's steps in request order, each with its job's status.
	WorkflowSteps(ctx context.Context, id string) ([]WorkflowStepState, error)
	// WorkflowSetStatus moves a workflow from → to at now (finished_at set for an end state);
	// ErrConflict when it is no longer from, ErrNotFound when it does not exist.
	WorkflowSetStatus(ctx context.Context, id string, from, to WorkflowStatus, now time.Time) error
	// WorkflowListSettled returns up to limit running workflows whose every step's job has
	// ended (or is gone): the resolver's to end.
	WorkflowListSettled(ctx context.Context, limit int) ([]string, error)
	// WorkflowList returns a page of workflows, newest first.
	WorkflowList(ctx context.Context, p WorkflowListParams) ([]Workflow, error)
	// WorkflowDeleteFinished deletes up to limit ended workflows (and their steps) that
	// finished before before, and returns how many.
	WorkflowDeleteFinished(ctx context.Context, before time.Time, limit int) (int, error)
}
