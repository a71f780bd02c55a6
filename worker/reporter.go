package worker

import (
	"context"
	"time"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/streams"
)

// flushStarts reports one batch of starts. A start report is advisory (the result says it all),
// so a permanent refusal or the flush deadline gives it up; either way the jobs' results are
// released for reporting.
func (w *Worker) flushStarts(ctx context.Context, runs []*run) {
	defer func() {
		for _, r := range runs {
			close(r.started)
		}
	}()
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.job.ID
	}
	var resp client.StartResponse
	err := w.retry(ctx, "report job starts", isPermanentAPIError, func(ctx context.Context) error {
		var err error
		resp, err = w.cfg.API.Start(ctx, client.StartRequest{WorkerID: w.cfg.WorkerID, JobIDs: ids})
		return err
	})
	if err != nil {
		w.log.Warn("start report given up", "error", err, "job_ids", ids)
		return
	}
	w.cancelJobs(resp.Cancel)
}

// flushResults reports one batch of results, then acks the jobs' entries and frees their slots.
// While the worker runs a result is never dropped: failed calls are retried with backoff, and a
// batch the API refuses as a whole (a 4xx) is split until the refused result is alone, so one
// bad result cannot hold the others back.
func (w *Worker) flushResults(ctx context.Context, runs []*run) {
	var resp client.CompleteResponse
	err := w.retry(ctx, "report job results",
		func(err error) bool { return len(runs) > 1 && isPermanentAPIError(err) },
		func(ctx context.Context) error {
			req := client.CompleteRequest{WorkerID: w.cfg.WorkerID, Results: make([]client.JobResult, len(runs)),
				InFlight: w.runningIDs()}
			for i, r := range runs {
				req.Results[i] = r.result
			}
			var err error
			resp, err = w.cfg.API.Complete(ctx, req)
			return err
		})
	switch {
	case err != nil && ctx.Err() == nil:
		w.log.Warn("result batch refused; splitting it", "error", err, "results", len(runs))
		w.flushResults(ctx, runs[:len(runs)/2])
		w.flushResults(ctx, runs[len(runs)/2:])
		return
	case err != nil:
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.job.ID
		}
		w.log.Error("results not reported before the flush deadline; their leases will expire and the jobs be retried",
			"error", err, "job_ids", ids)
		w.releaseRuns(runs)
		return
	}
	w.cancelJobs(resp.Cancel)
	for _, o := range resp.Outcomes {
		if o.Outcome == client.OutcomeStale {
			w.log.Info("result not recorded: the job is no longer this worker's attempt", "job_id", o.JobID,
				"status", o.Status)
		} else {
			w.log.Debug("result recorded", "job_id", o.JobID, "outcome", o.Outcome, "status", o.Status)
		}
	}
	var ds []streams.Delivery
	for _, r := range runs {
		ds = append(ds, r.deliveries...)
	}
	w.ack(ds)
	w.releaseRuns(runs)
}

func (w *Worker) releaseRuns(runs []*run) {
	n := 0
	for _, r := range runs {
		n += len(r.deliveries)
	}
	w.slots.release(n)
}

// touchLoop resets the idle time of running jobs' entries every TouchInterval, so the reclaimer
// (which looks at entries idle past the claim-idle threshold) leaves long jobs alone.
func (w *Worker) touchLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	if w.cfg.TouchInterval <= 0 {
		return
	}
	t := time.NewTicker(w.cfg.TouchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		var ds []streams.Delivery
		for _, r := range w.running {
			ds = append(ds, r.deliveries...)
		}
		w.mu.Unlock()
		if err := w.cfg.Streams.Touch(ctx, w.cfg.WorkerID, ds); err != nil && ctx.Err() == nil {
			w.log.Warn("touch running entries failed", "error", err, "count", len(ds))
		}
	}
}
