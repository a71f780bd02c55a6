package engine

import (
	"context"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// flowSpec is what a submit asks beyond its own run. A submit without one is a plain job,
// which takes the group commit (submit.go) and pays for none of this.
type flowSpec struct {
	// dependsOn are the existing jobs the job waits for.
	dependsOn []string
	// tolerant: on_parent_failure run (store.FlowTolerant).
	tolerant bool
	// approval is the policy that holds the job for approval (nil: none).
	approval *store.ApprovalPolicy
}

// isFlow reports whether p asks for anything of a flow.
func (p *SubmitParams) isFlow() bool {
	return len(p.DependsOn) > 0 || p.OnParentFailure != ""
}

// prepareFlow checks the flow fields of a validated submit and matches it against the
// approval policies (in memory: no statement), and returns its flowSpec, nil for a plain job.
func (e *Engine) prepareFlow(_ context.Context, p *SubmitParams) (*flowSpec, error) {
	pol := e.approvals.match(p)
	if !p.isFlow() {
		if pol == nil {
			return nil, nil
		}
		return &flowSpec{approval: pol}, nil
	}
	deps, err := checkDependsOn(p.JobID, p.DependsOn)
	if err != nil {
		return nil, err
	}
	tolerant, err := checkOnParentFailure(p.OnParentFailure, len(deps) > 0)
	if err != nil {
		return nil, err
	}
	return &flowSpec{dependsOn: deps, tolerant: tolerant, approval: pol}, nil
}

// jobPlan is the plan of one submitted job of a flow: the job, waiting for its depends_on.
func (e *Engine) jobPlan(_ context.Context, r *submitReq) (*flowPlan, error) {
	f := r.flow
	pl := &flowPlan{agent: r.p.Agent}
	job := &flowJob{r: r, status: store.JobPending, details: map[string]any{}}
	pl.jobs = append(pl.jobs, job)
	if len(f.dependsOn) > 0 {
		job.status, job.flow = store.JobWaiting, store.FlowHasParents
		if f.tolerant {
			job.flow |= store.FlowTolerant
			job.details["on_parent_failure"] = OnParentFailureRun
		}
		job.details["depends_on"] = f.dependsOn
		for i, id := range f.dependsOn {
			pl.deps = append(pl.deps, store.JobDep{JobID: r.p.JobID, ParentID: id})
			pl.external = append(pl.external, externalParent{id: id, field: fmt.Sprintf("depends_on[%d]", i)})
		}
	}
	if f.approval != nil {
		holdForApproval(pl, job, f.approval)
	}
	return pl, nil
}
