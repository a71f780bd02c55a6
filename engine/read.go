package engine

import (
	"context"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// Get returns one job.
func (e *Engine) Get(ctx context.Context, id string) (store.Job, error) {
	j, err := e.store.JobGet(ctx, id)
	if err != nil {
		return store.Job{}, fmt.Errorf("get job %s: %w", id, err)
	}
	return j, nil
}

// List returns a page of jobs, newest first.
func (e *Engine) List(ctx context.Context, p store.JobListParams) ([]store.Job, error) {
	if p.Status != "" && !p.Status.Valid() {
		return nil, invalid("status", "unknown status %q", p.Status)
	}
	jobs, err := e.store.JobList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// Parents returns the dependency rows of job id: the jobs it waits for (a fan-out parent's:
// its children, labelled with their nodes), without their results.
func (e *Engine) Parents(ctx context.Context, id string) ([]store.JobParent, error) {
	ps, err := e.store.JobParents(ctx, []string{id}, 0)
	if err != nil {
		return nil, fmt.Errorf("read the parents of job %s: %w", id, err)
	}
	return ps, nil
}
