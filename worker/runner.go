package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// maxErrorBytes caps the error text reported for a failed attempt.
const maxErrorBytes = 8 << 10

// run is one claimed job on its way through the worker: handler, start report, result report,
// ack. It holds one slot per entry in deliveries until the entries are acknowledged.
type run struct {
	job        Job
	deliveries []streams.Delivery
	cancel     context.CancelCauseFunc
	// started is closed once the job's start was reported (or given up on): the result waits
	// for it so the API never sees a result before the start.
	started chan struct{}
	// startState says where the start report is: startQueued until a flush takes it
	// (startSending) or the result, ready first, takes it along (startFolded).
	startState atomic.Int32
	result     wire.JobResult
	began      time.Time
	// leaseTTL is the TTL of the job's lease (0: unknown); the renewer renews every third of it.
	leaseTTL time.Duration
	// leaseGone is set once a renewal said the lease is gone: it is not renewed any more.
	leaseGone atomic.Bool
}

// Where a run's start report is.
const (
	startQueued  = iota // in the start batcher, not yet sent
	startSending        // taken by a flush: the result waits for it
	startFolded         // the result was ready first: the completion records the start
)

// startJob starts the handler of a claimed job in its own goroutine and queues its start report.
func (w *Worker) startJob(t *config.JobType, cj wire.ClaimedJob, ds []streams.Delivery) {
	timeout := time.Duration(cj.Timeout)
	if timeout <= 0 {
		timeout = t.Timeout
	}
	if timeout <= 0 {
		timeout = config.JobTimeoutDefault
	}
	job := Job{
		ID: cj.JobID, Type: cj.Type, Payload: cj.Payload, Attempt: cj.Attempt, Timeout: timeout,
		LeaseToken: cj.LeaseToken, GPUIndex: cj.GPUIndex, GPUIndexes: cj.GPUIndexes, Parents: cj.Parents,
	}
	if job.Type == "" {
		job.Type = t.Name
	}
	job.Env = JobEnv(job)
	ctx, cancel := context.WithCancelCause(w.handlerCtx)
	r := &run{job: job, deliveries: ds, cancel: cancel, started: make(chan struct{}), began: time.Now(),
		leaseTTL: time.Duration(cj.LeaseTTL)}

	w.mu.Lock()
	w.held[r] = struct{}{}
	if old, dup := w.running[job.ID]; dup {
		// The API claimed a job this worker still runs: the old attempt is stale, stop it.
		w.log.Warn("job claimed again while running; cancelling the older attempt", "job_id", job.ID,
			"attempt", job.Attempt, "old_attempt", old.job.Attempt)
		old.cancel(errCancelled)
	}
	w.running[job.ID] = r
	w.mu.Unlock()

	w.handling.Add(1)
	w.jobs.Add(1)
	go w.execute(ctx, r)
	w.starts.Add(r)
}

// execute runs the handler under the job's timeout, then queues the result once the start is
// reported.
func (w *Worker) execute(ctx context.Context, r *run) {
	defer w.jobs.Done()
	ctx, span := w.startRun(ctx, r)
	log := w.log.With("job_id", r.job.ID, "attempt", r.job.Attempt, "job_type", r.job.Type, "lease_token", r.job.LeaseToken)
	log.Debug("job started")
	jctx, cancelTimeout := context.WithTimeout(ctx, r.job.Timeout)
	out, err := w.runJob(jctx, r.job)
	cause := context.Cause(jctx)
	cancelTimeout()
	r.cancel(nil)

	w.mu.Lock()
	if w.running[r.job.ID] == r {
		delete(w.running, r.job.ID)
	}
	w.mu.Unlock()
	w.handling.Done()

	if len(out) > 0 && !json.Valid(out) {
		out = outputJSON(out) // a custom handler's text must not break the whole report
	}
	r.result = wire.JobResult{JobID: r.job.ID, Attempt: r.job.Attempt, LeaseToken: r.job.LeaseToken, Result: out}
	took := time.Since(r.began)
	if err == nil {
		r.result.Status = wire.ResultDone
		log.DebugContext(ctx, "job done", "took_seconds", took.Seconds())
	} else {
		r.result.Status = wire.ResultFailed
		r.result.Error, r.result.NonRetryable = failureText(err, cause, r.job.Timeout)
		log.InfoContext(ctx, "job failed", "took_seconds", took.Seconds(), "error", r.result.Error, "non_retryable", r.result.NonRetryable)
	}
	w.endRun(ctx, span, r, took)
	// A handler that ended before its start report went out needs no start report: the API
	// records the start along with the result (claimed -> running -> done in one write), which
	// saves a round trip and a transaction per short job.
	if !r.startState.CompareAndSwap(startQueued, startFolded) {
		<-r.started
	}
	w.results.Add(r)
}

// failureText is the reported error of a failed attempt; a shutdown or timeout is always
// retryable whatever the handler made of it.
func failureText(err, cause error, timeout time.Duration) (string, bool) {
	msg, nonRetryable := err.Error(), IsNonRetryable(err)
	switch {
	case errors.Is(cause, errShutdown):
		msg, nonRetryable = errShutdown.Error(), false
	case errors.Is(cause, errCancelled):
		msg = errCancelled.Error() + ": " + msg
	case errors.Is(cause, errLeaseLost):
		msg, nonRetryable = errLeaseLost.Error()+": "+msg, false
	case errors.Is(cause, context.DeadlineExceeded):
		msg, nonRetryable = fmt.Sprintf("timed out after %s: %s", timeout, msg), false
	}
	if len(msg) > maxErrorBytes {
		msg = msg[:maxErrorBytes] + "…"
	}
	return msg, nonRetryable
}

// callHandler runs the job's handler, turning a panic into a failed attempt.
func (w *Worker) callHandler(ctx context.Context, job Job) (out []byte, err error) {
	h, ok := w.handlers[job.Type]
	if !ok {
		// A job of a type this worker does not serve came down one of its streams: another
		// attempt may reach the right workers.
		return nil, fmt.Errorf("worker %s does not serve job type %q", w.cfg.WorkerID, job.Type)
	}
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("handler panicked", "job_id", job.ID, "panic", p, "stack", string(debug.Stack()))
			out, err = nil, fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h.Run(ctx, job)
}
