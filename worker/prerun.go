package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/gpuorch/orchestrator/wire"
)

// PreRunner asks the orchestrator whether a job it claimed may start: the job's type's pre-run
// hook decides (POST /internal/jobs/pre_run; *client.Client has it). The orchestrator makes the
// hook's call: the worker needs neither a route to the hook nor its secret.
type PreRunner interface {
	PreRun(ctx context.Context, req wire.PreRunRequest) (wire.PreRunResponse, error)
}

// preRunTypes is the set of job types with a pre-run hook that the orchestrator's answers to
// this worker's registration and heartbeats name (nil until the first).
type preRunTypes struct{ v atomic.Pointer[[]string] }

// set records the orchestrator's list.
func (p *preRunTypes) set(types []string) {
	types = slices.Clone(types)
	p.v.Store(&types)
}

// has reports whether the orchestrator named typ.
func (p *preRunTypes) has(typ string) bool {
	types := p.v.Load()
	return types != nil && slices.Contains(*types, typ)
}

// hooked reports whether a job of typ asks before it runs: its type has a hook in the
// worker's configuration (Config.PreRunTypes) or in the orchestrator's last answer.
func (w *Worker) hooked(typ string) bool {
	return w.cfg.PreRun != nil && (slices.Contains(w.cfg.PreRunTypes, typ) || w.preRunTypes.has(typ))
}

// runJob runs job's handler, once its type's pre-run hook let it: a hook's refusal fails the
// attempt for good with the hook's message, anything else that keeps it from running fails
// it so that it is retried.
func (w *Worker) runJob(ctx context.Context, job Job) ([]byte, error) {
	if w.hooked(job.Type) {
		resp, err := w.cfg.PreRun.PreRun(ctx, wire.PreRunRequest{WorkerID: w.cfg.WorkerID, JobID: job.ID,
			Attempt: job.Attempt, LeaseToken: job.LeaseToken})
		switch {
		case err != nil:
			return nil, fmt.Errorf("pre-run check: %w", err)
		case resp.Decision == wire.PreRunFail:
			return nil, NonRetryable(errors.New(resp.Message))
		case resp.Decision != wire.PreRunRun:
			return nil, errors.New(resp.Message)
		}
	}
	return w.callHandler(ctx, job)
}
