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
	// fanOut is the job's fan-out, its nodes found (nil: none).
	fanOut *fanOutSpec
}

// isFlow reports whether p asks for anything of a flow.
func (p *SubmitParams) isFlow() bool {
	return len(p.DependsOn) > 0 || p.OnParentFailure != "" || p.FanOut != nil
}

// prepareFlow checks the flow fields of a validated submit and matches it against the
// approval policies (in memory: no statement), and returns its flowSpec, nil for a plain job.
func (e *Engine) prepareFlow(ctx context.Context, p *SubmitParams) (*flowSpec, error) {
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
	spec := &flowSpec{dependsOn: deps, tolerant: tolerant, approval: pol}
	if p.FanOut != nil {
		if spec.fanOut, err = e.checkFanOut(ctx, p); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// jobPlan is the plan of one submitted job of a flow: the job, waiting for its depends_on,
// with its fan-out's children and its approval's hold.
func (e *Engine) jobPlan(ctx context.Context, r *submitReq) (*flowPlan, error) {
	f := r.flow
	pl := &flowPlan{agent: r.p.Agent}
	job := &flowJob{r: r, status: store.JobPending, details: map[string]any{}}
	parents := make([]parentRef, 0, len(f.dependsOn))
	for i, id := range f.dependsOn {
		parents = append(parents, parentRef{id: id})
		pl.external = append(pl.external, externalParent{id: id, field: fmt.Sprintf("depends_on[%d]", i)})
	}
	if len(f.dependsOn) > 0 {
		job.details["depends_on"] = f.dependsOn
		if f.tolerant {
			job.details["on_parent_failure"] = OnParentFailureRun
		}
	}
	if err := e.planJob(ctx, pl, job, parents, f.tolerant); err != nil {
		return nil, err
	}
	return pl, nil
}
