package engine

import (
	"context"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// Prepared is a submit that PrepareSubmit validated and filled with its type's defaults, ready to
// be inserted in a transaction of the caller's (SubmitTx).
type Prepared struct{ r *submitReq }

// PrepareSubmit validates p exactly as Submit does (the type, the agent, the payload, the
// resources the cluster could ever place, the route) and returns it ready for SubmitTx: the
// caller makes the job with rows of its own, in one transaction. Errors are Submit's: a
// *ValidationError or an *UnsatisfiableError naming the field.
func (e *Engine) PrepareSubmit(ctx context.Context, p SubmitParams) (*Prepared, error) {
	r, err := e.prepare(ctx, p)
	if err != nil {
		return nil, err
	}
	return &Prepared{r: r}, nil
}

// TxSubmitter inserts prepared jobs inside the transaction of a SubmitTx.
type TxSubmitter struct {
	e    *Engine
	tx   store.Tx
	jobs []store.Job
	ctxs []context.Context
	// flows are the jobs of a flow (an approval policy holds them, or they wait for others)
	// written with their plans, which are followed up once the transaction has committed.
	flows []txFlow
}

// txFlow is a flow's plan and the jobs a TxSubmitter wrote for it.
type txFlow struct {
	pl   *flowPlan
	jobs []store.Job
}

// Insert inserts the job of p and its job.submitted audit row in the transaction, at the
// engine's clock. A job whose id exists already is returned as it is with created=false, and
// nothing is written: a deterministic id is the caller's second guard against a double.
func (s *TxSubmitter) Insert(ctx context.Context, p *Prepared) (job store.Job, created bool, err error) {
	if p.r.flow != nil {
		// Held by an approval policy, or waiting for other jobs: written as a submit of a
		// flow is, its request and dependency rows with it.
		pl, err := s.e.jobPlan(ctx, p.r)
		if err != nil {
			return store.Job{}, false, err
		}
		jobs, existing, err := s.e.writeFlow(ctx, s.tx, pl)
		switch {
		case err != nil:
			return store.Job{}, false, err
		case existing != nil:
			return *existing, false, nil
		}
		s.flows = append(s.flows, txFlow{pl: pl, jobs: jobs})
		return jobs[0], true, nil
	}
	now := s.e.nowUTC()
	job, created, err = s.tx.JobInsert(ctx, p.r.insertParams(now))
	if err != nil || !created {
		return job, created, err
	}
	if err := s.tx.AuditInsert(ctx, []store.AuditEvent{p.r.submittedEvent(job, now)}); err != nil {
		return store.Job{}, false, err
	}
	s.jobs, s.ctxs = append(s.jobs, job), append(s.ctxs, p.r.ctx)
	return job, true, nil
}

// SubmitTx runs fn in one transaction of the engine's store behind fence (nil: none), with a
// TxSubmitter that inserts jobs in it beside the caller's own rows: a row that says why a job
// exists (a schedule's fire) commits with the job or not at all. Once the transaction has
// committed, the jobs it created are published as submitted jobs are (their enqueued marks a
// moment later; a GPU job is left to the scheduler, which the publish wakes), and returned.
// A publish that fails leaves them to the Dispatcher. The jobs are counted by the engine's
// Observer like any submit.
func (e *Engine) SubmitTx(ctx context.Context, fence Fence, fn func(tx store.Tx, sub *TxSubmitter) error) ([]store.Job, error) {
	var sub *TxSubmitter
	err := e.fenced(ctx, fence, func(tx store.Tx) error {
		sub = &TxSubmitter{e: e, tx: tx} // a rerun of the transaction starts again
		return fn(tx, sub)
	})
	if err != nil {
		return nil, fmt.Errorf("submit in a transaction: %w", err)
	}
	if len(sub.jobs) > 0 {
		defer e.outbox.HoldAnswered()()
		e.outbox.PublishSubmitted(ctx, sub.jobs, sub.ctxs)
	}
	created := sub.jobs
	for _, f := range sub.flows {
		e.afterFlow(ctx, f.pl, f.jobs)
		created = append(created, f.jobs...)
	}
	return created, nil
}
