package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/store"
)

// Audit event types of workflows (their rows carry store.WorkflowAuditKey as job_id).
const (
	EventWorkflowCreated   = "workflow.created"
	EventWorkflowDone      = "workflow.done"
	EventWorkflowFailed    = "workflow.failed"
	EventWorkflowCancelled = "workflow.cancelled"
)

// Limits of workflows.
const (
	// MaxWorkflowSteps bounds a workflow's steps (all phases together).
	MaxWorkflowSteps = 100
)

// WorkflowIDPattern is what a workflow id must match: 64 characters at most, so that a
// step's job id, "<workflow id>.<step>", fits the 128 of a job id.
var WorkflowIDPattern = ident.Pattern{Min: 1, Max: 64}

// WorkflowParams is one workflow to submit: named steps, each a job template with the steps it
// needs (a workflow of phases comes as steps too, each needing every step of the phase
// before).
type WorkflowParams struct {
	// WorkflowID is client-chosen (WorkflowIDPattern) or generated when empty; a workflow
	// that exists is answered, not created again.
	WorkflowID string
	Agent      string
	Actor      string
	Steps      []WorkflowStepParams
	// Spec is the request as accepted, kept for GET /workflows/{id} and compared on a
	// resubmit of the id.
	Spec json.RawMessage
}

// WorkflowStepParams is one step of a workflow.
type WorkflowStepParams struct {
	// Name is the step's name (ValidStepName), unique in the workflow; its job's id is
	// "<workflow id>.<name>".
	Name string
	// Needs are the steps that must end done before this one starts (its parents).
	Needs []string
	// Phase is the step's phase (0-based) in a workflow of phases, 0 otherwise.
	Phase int
	// Job is the step's job: its JobID and Agent are the workflow's to set; DependsOn must be
	// empty (Needs names the parents); OnParentFailure applies to Needs.
	Job SubmitParams
	// Field is how errors name the step in the request ("steps[2]", "phases[1][0]").
	Field string
}

// WorkflowOutcome answers a workflow submit.
type WorkflowOutcome struct {
	Workflow store.Workflow
	Steps    []store.WorkflowStep
	Created  bool
}

// SubmitWorkflow checks p (step names, needs naming steps of the workflow, no cycle, every
// step a valid submit) and writes the workflow, its steps' jobs and their dependencies in one
// transaction with a workflow.created audit row: steps without needs start pending, the others
// waiting for the resolver. A workflow_id that exists answers that workflow when p repeats its
// request (a *MismatchError otherwise; another agent's id is a conflict).
func (e *Engine) SubmitWorkflow(ctx context.Context, p WorkflowParams) (WorkflowOutcome, error) {
	pl, steps, err := e.workflowPlan(ctx, &p)
	if err != nil {
		return WorkflowOutcome{}, err
	}
	out, err := e.commitFlow(ctx, pl)
	if err != nil {
		if _, ok := errors.AsType[*ValidationError](err); ok {
			return WorkflowOutcome{}, err
		}
		return WorkflowOutcome{}, fmt.Errorf("submit workflow %s: %w", p.WorkflowID, err)
	}
	if !out.existed {
		w := *pl.workflow
		w.CreatedAt, w.UpdatedAt = out.jobs[0].CreatedAt, out.jobs[0].CreatedAt
		return WorkflowOutcome{Workflow: w, Steps: steps, Created: true}, nil
	}
	w, err := e.store.WorkflowGet(ctx, p.WorkflowID, false)
	if err != nil {
		return WorkflowOutcome{}, fmt.Errorf("submit workflow %s: read the existing one: %w", p.WorkflowID, err)
	}
	switch {
	case w.Agent != p.Agent:
		return WorkflowOutcome{}, fmt.Errorf("submit workflow %s: the id belongs to another agent: %w", p.WorkflowID, store.ErrConflict)
	case !SameJSON(w.Spec, p.Spec):
		return WorkflowOutcome{}, &MismatchError{JobID: w.ID, Field: "steps", Message: "the workflow exists with other steps" +
			"; a resubmit of a workflow_id must repeat its first request (a new workflow needs a new workflow_id)"}
	}
	states, err := e.store.WorkflowSteps(ctx, w.ID)
	if err != nil {
		return WorkflowOutcome{}, fmt.Errorf("submit workflow %s: %w", w.ID, err)
	}
	out2 := WorkflowOutcome{Workflow: w}
	for _, s := range states {
		out2.Steps = append(out2.Steps, s.WorkflowStep)
	}
	return out2, nil
}

// workflowPlan checks p and builds its plan.
func (e *Engine) workflowPlan(ctx context.Context, p *WorkflowParams) (*flowPlan, []store.WorkflowStep, error) {
	if p.WorkflowID == "" {
		p.WorkflowID = newWorkflowID()
	} else if !WorkflowIDPattern.MatchString(p.WorkflowID) {
		return nil, nil, invalid("workflow_id", "must be %s", WorkflowIDPattern.Rule())
	}
	if err := checkSteps(p.Steps); err != nil {
		return nil, nil, err
	}
	if len(p.Spec) == 0 {
		p.Spec = json.RawMessage(`{}`)
	}
	pl := &flowPlan{agent: p.Agent, workflow: &store.Workflow{ID: p.WorkflowID, Agent: p.Agent,
		Status: store.WorkflowRunning, Spec: p.Spec, CreatedBy: p.Actor}}
	var steps []store.WorkflowStep
	for i, s := range p.Steps {
		jp := s.Job
		jp.JobID, jp.Agent, jp.Actor = p.WorkflowID+"."+s.Name, p.Agent, p.Actor
		if len(jp.DependsOn) > 0 {
			return nil, nil, invalid(s.Field+".depends_on", "a step names its parents in needs")
		}
		tolerant, err := checkOnParentFailure(jp.OnParentFailure, len(s.Needs) > 0)
		if err != nil {
			return nil, nil, prefixed(s.Field, err)
		}
		jp.OnParentFailure = ""
		r, err := e.prepare(ctx, jp)
		if err != nil {
			return nil, nil, prefixed(s.Field, err)
		}
		fj := &flowJob{r: r, status: store.JobPending, flow: store.FlowHasDependents, // the workflow waits for it
			details: map[string]any{"workflow_id": p.WorkflowID, "step": s.Name}}
		parents := make([]parentRef, 0, len(s.Needs))
		for _, n := range s.Needs {
			parents = append(parents, parentRef{id: p.WorkflowID + "." + n, label: n})
		}
		if len(s.Needs) > 0 {
			fj.details["needs"] = s.Needs
			if tolerant {
				fj.details["on_parent_failure"] = OnParentFailureRun
			}
		}
		if err := e.planJob(ctx, pl, fj, parents, tolerant); err != nil {
			return nil, nil, prefixed(s.Field, err)
		}
		steps = append(steps, store.WorkflowStep{WorkflowID: p.WorkflowID, Step: s.Name, JobID: jp.JobID,
			Needs: s.Needs, Phase: s.Phase, Position: i})
	}
	pl.steps = steps
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = s.Step
	}
	pl.events = append(pl.events, workflowEvent(p.WorkflowID, EventWorkflowCreated, p.Actor, time.Time{},
		map[string]any{"agent": p.Agent, "steps": names}))
	return pl, steps, nil
}

// checkSteps checks the steps' names and needs: unique names, needs naming other steps, each
// once, and no cycle.
func checkSteps(steps []WorkflowStepParams) error {
	if len(steps) == 0 {
		return invalid("steps", "is required: at least one step")
	}
	if len(steps) > MaxWorkflowSteps {
		return invalid("steps", "has %d steps, over the limit of %d", len(steps), MaxWorkflowSteps)
	}
	index := make(map[string]int, len(steps))
	for i, s := range steps {
		if !ValidStepName(s.Name) {
			return invalid(s.Field+".name", "must be %s", StepNameRule)
		}
		if j, dup := index[s.Name]; dup {
			return invalid(s.Field+".name", "step %q is named twice (%s)", s.Name, steps[j].Field)
		}
		index[s.Name] = i
	}
	for _, s := range steps {
		seen := map[string]bool{}
		for k, n := range s.Needs {
			field := fmt.Sprintf("%s.needs[%d]", s.Field, k)
			switch _, ok := index[n]; {
			case !ok:
				return invalid(field, "no step %q in the workflow", n)
			case n == s.Name:
				return invalid(field, "a step cannot need itself: that is a cycle")
			case seen[n]:
				return invalid(field, "step %q is listed twice", n)
			}
			seen[n] = true
		}
	}
	if cycle := findCycle(steps, index); cycle != nil {
		return invalid("steps", "the needs form a cycle: %s", strings.Join(cycle, " -> "))
	}
	return nil
}

// findCycle returns a cycle of the needs graph (its steps, the first repeated at the end), or
// nil: a depth-first walk that meets a step still on its path.
func findCycle(steps []WorkflowStepParams, index map[string]int) []string {
	const (
		unseen = iota
		onPath
		finished
	)
	state := make([]int, len(steps))
	var path []string
	var visit func(i int) []string
	visit = func(i int) []string {
		state[i] = onPath
		path = append(path, steps[i].Name)
		for _, n := range steps[i].Needs {
			j := index[n]
			switch state[j] {
			case onPath:
				for k, name := range path {
					if name == n {
						return append(append([]string{}, path[k:]...), n)
					}
				}
			case unseen:
				if c := visit(j); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[i] = finished
		return nil
	}
	for i := range steps {
		if state[i] == unseen {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}

// prefixed names err's field inside the request part field ("steps[2]" + ".type").
func prefixed(field string, err error) error {
	if ve, ok := errors.AsType[*ValidationError](err); ok {
		return &ValidationError{Field: field + "." + ve.Field, Message: ve.Message}
	}
	if ue, ok := errors.AsType[*UnsatisfiableError](err); ok {
		return &UnsatisfiableError{Field: field + "." + ue.Field, Message: ue.Message}
	}
	return err
}

// newWorkflowID returns a fresh workflow id: "w" + 48 bits of milliseconds + 80 random bits,
// hex, as NewJobID.
func newWorkflowID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return fmt.Sprintf("w%x", b[:])
}

// GetWorkflow returns a workflow and its steps with their jobs' status.
func (e *Engine) GetWorkflow(ctx context.Context, id string) (store.Workflow, []store.WorkflowStepState, error) {
	w, err := e.store.WorkflowGet(ctx, id, false)
	if err != nil {
		return store.Workflow{}, nil, fmt.Errorf("get workflow %s: %w", id, err)
	}
	steps, err := e.store.WorkflowSteps(ctx, id)
	if err != nil {
		return store.Workflow{}, nil, fmt.Errorf("get workflow %s: %w", id, err)
	}
	return w, steps, nil
}

// ListWorkflows returns a page of workflows, newest first.
func (e *Engine) ListWorkflows(ctx context.Context, p store.WorkflowListParams) ([]store.Workflow, error) {
	ws, err := e.store.WorkflowList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	return ws, nil
}

// CancelWorkflow cancels a running workflow: in one transaction every step's job that has not
// ended is cancelled (a fan-out step's children with it), and the workflow moves to cancelled
// with a workflow.cancelled audit row. A workflow that has ended gives ErrWorkflowEnded.
func (e *Engine) CancelWorkflow(ctx context.Context, id, actor string) (store.Workflow, error) {
	now := e.nowUTC()
	var w store.Workflow
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		var err error
		if w, err = tx.WorkflowGet(ctx, id, true); err != nil {
			return err
		}
		if w.Status.Terminal() {
			return fmt.Errorf("%w: it is %s", ErrWorkflowEnded, w.Status)
		}
		steps, err := tx.WorkflowSteps(ctx, id)
		if err != nil {
			return err
		}
		var ids []string
		for _, s := range steps {
			if s.JobStatus != "" && !s.JobStatus.Terminal() {
				ids = append(ids, s.JobID)
			}
		}
		events, err := e.cancelJobs(ctx, tx, ids, actor, "workflow "+id+" cancelled", now)
		if err != nil {
			return err
		}
		if err := tx.WorkflowSetStatus(ctx, id, store.WorkflowRunning, store.WorkflowCancelled, now); err != nil {
			return err
		}
		w.Status, w.UpdatedAt, w.FinishedAt = store.WorkflowCancelled, now, &now
		events = append(events, workflowEvent(id, EventWorkflowCancelled, actor, now, map[string]any{"cancelled_steps": len(ids)}))
		return tx.AuditInsert(ctx, events)
	})
	if err != nil {
		if errors.Is(err, ErrWorkflowEnded) {
			return store.Workflow{}, err
		}
		return store.Workflow{}, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	return w, nil
}

// ErrWorkflowEnded is returned for a cancel of a workflow that has ended. The API answers 409.
var ErrWorkflowEnded = errors.New("workflow has ended")

// cancelJobs cancels the jobs among ids that are not terminal, locked in id order, and what
// each takes with it (a fan-out parent's children).
func (e *Engine) cancelJobs(ctx context.Context, tx store.Tx, ids []string, actor, why string, now time.Time) ([]store.AuditEvent, error) {
	jobs, err := tx.JobGetMany(ctx, ids, true)
	if err != nil {
		return nil, err
	}
	var events []store.AuditEvent
	for i := range jobs {
		j := &jobs[i]
		if j.Status.Terminal() || !CanTransition(j.Status, store.JobCancelled) {
			continue
		}
		evs, err := cancelLocked(ctx, tx, j, actor, map[string]any{"reason": why}, why, now)
		if err != nil {
			return nil, err
		}
		more, err := e.cancelFlowOf(ctx, tx, j, actor, now)
		if err != nil {
			return nil, err
		}
		events = append(append(events, evs...), more...)
	}
	return events, nil
}

// workflowEvent is an audit row of workflow id.
func workflowEvent(id, typ, actor string, now time.Time, details map[string]any) store.AuditEvent {
	ev := store.AuditEvent{TS: now, EventType: typ, JobID: store.WorkflowAuditKey(id), Actor: actor}
	if len(details) > 0 {
		ev.Details, _ = json.Marshal(details)
	}
	return ev
}
