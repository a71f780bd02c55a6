package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/store"
)

// This file holds what jobs that wait for other jobs share: the submit's flow fields, their
// checks, and what a claimed child sees of its parents (docs/architecture.md, "Workflows,
// fan-out and approvals").

// Limits of flows.
const (
	// MaxDependsOn bounds a job's depends_on.
	MaxDependsOn = 64
)

// What a job does when one of its parents fails (SubmitParams.OnParentFailure).
const (
	// OnParentFailureCancel (the default): a parent that ends dead_letter or cancelled
	// cancels the job.
	OnParentFailureCancel = "cancel"
	// OnParentFailureRun: the job runs once every parent has ended, however they ended.
	OnParentFailureRun = "run"
)

// Audit event types of flows that are not transitions.
const (
	// EventDependencyFailed is written, beside the cancellation, when a parent's failure
	// cancels a waiting job: which parent, how it ended.
	EventDependencyFailed = "job.dependency_failed"
)

// Parent is one parent of a claimed job, as its worker sees it: how it ended and its result,
// left out (Truncated) when it did not fit the claim's budget (flows.parent_results_max_bytes).
type Parent struct {
	JobID string `json:"job_id"`
	// Step is the parent's step name in a workflow; for a fan-out parent's result, the node.
	Step      string          `json:"step,omitempty"`
	Status    string          `json:"status"`
	Result    json.RawMessage `json:"result,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
}

// parentsOf turns the parent rows of one job into what its claim carries, each result in
// whole or not at all, in the order given, within max bytes of results in all.
func parentsOf(rows []store.JobParent, maxBytes int) []Parent {
	out := make([]Parent, 0, len(rows))
	left := maxBytes
	for _, r := range rows {
		p := Parent{JobID: r.ParentID, Step: r.Label, Status: string(r.Status)}
		if p.Status == "" {
			p.Status = "gone"
		}
		switch {
		case r.ResultBytes == 0:
		case r.Result != nil && len(r.Result) <= left:
			p.Result, left = r.Result, left-len(r.Result)
		default:
			p.Truncated = true
		}
		out = append(out, p)
	}
	return out
}

// checkDependsOn checks a submit's depends_on: ids, each once, not the job itself (the one
// cycle a new job can close: its parents exist already), at most MaxDependsOn.
func checkDependsOn(jobID string, ids []string) ([]string, error) {
	if len(ids) > MaxDependsOn {
		return nil, invalid("depends_on", "has %d jobs, over the limit of %d", len(ids), MaxDependsOn)
	}
	for i, id := range ids {
		field := fmt.Sprintf("depends_on[%d]", i)
		switch {
		case !JobIDPattern.MatchString(id):
			return nil, invalid(field, "must be %s", JobIDPattern.Rule())
		case id == jobID:
			return nil, invalid(field, "a job cannot depend on itself: that is a cycle")
		case slices.Contains(ids[:i], id):
			return nil, invalid(field, "job %q is listed twice", id)
		}
	}
	return ids, nil
}

// checkOnParentFailure checks on_parent_failure and says whether it is run.
func checkOnParentFailure(v string, parents bool) (tolerant bool, err error) {
	switch v {
	case "", OnParentFailureCancel:
		return false, nil
	case OnParentFailureRun:
		if !parents {
			return false, invalid("on_parent_failure", "needs depends_on (or a workflow step's needs)")
		}
		return true, nil
	}
	return false, invalid("on_parent_failure", "must be %s or %s", OnParentFailureCancel, OnParentFailureRun)
}

// StepNameRule says what a workflow step's name must be: an identifier without '.' and ':'
// (a step's job id is "<workflow id>.<step>", which must stay unambiguous).
const StepNameRule = "1 to 63 of A-Z a-z 0-9 _ -"

// ValidStepName reports whether s is a step name (StepNameRule).
func ValidStepName(s string) bool {
	if !stepName.MatchString(s) {
		return false
	}
	for i := range len(s) {
		if s[i] == '.' || s[i] == ':' {
			return false
		}
	}
	return true
}

// stepName is the identifiers a step name is one of, before '.' and ':' are left out.
var stepName = ident.Pattern{Min: 1, Max: 63}

// claimParents reads the parents of the claimed jobs that have some (store.FlowHasParents),
// with their results within flows.parent_results_max_bytes per job; nil, without a statement,
// when none has.
func (e *Engine) claimParents(ctx context.Context, tx store.Tx, claimed []store.Job) (map[string][]Parent, error) {
	var ids []string
	for _, j := range claimed {
		if j.Flow.Has(store.FlowHasParents) {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	budget := e.cfg.Flows.ParentResultsMaxBytes
	rows, err := tx.JobParents(ctx, ids, budget)
	if err != nil {
		return nil, err
	}
	byJob := map[string][]store.JobParent{}
	for _, r := range rows {
		byJob[r.JobID] = append(byJob[r.JobID], r)
	}
	out := make(map[string][]Parent, len(byJob))
	for id, rs := range byJob {
		out[id] = parentsOf(rs, budget)
	}
	return out, nil
}
