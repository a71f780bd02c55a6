package worker

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// flushStarts reports one batch of starts. A start report is advisory (the result says it all),
// so a permanent refusal or the flush deadline gives it up; either way the jobs' results are
// released for reporting. The starts of jobs that already ended are left to their results.
func (w *Worker) flushStarts(ctx context.Context, runs []*run) {
	defer func() {
		for _, r := range runs {
			close(r.started)
		}
	}()
	ids := make([]string, 0, len(runs))
	for _, r := range runs {
		if r.startState.CompareAndSwap(startQueued, startSending) {
			ids = append(ids, r.job.ID)
		}
	}
	if len(ids) == 0 {
		return // every job of the batch ended first: their results carry the starts
	}
	var resp wire.StartResponse
	err := w.retry(ctx, "report job starts", isPermanentAPIError, func(ctx context.Context) error {
		var err error
		resp, err = w.cfg.API.Start(ctx, wire.StartRequest{WorkerID: w.cfg.WorkerID, JobIDs: ids})
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
// bad result cannot hold the others back. The one refusal that drops results is an expired
// lease (409 lease_expired for the whole call, or the lease_expired outcome of one result):
// this worker lost those jobs to a rescue, and another worker runs them now.
//
// When entries wait in a stream of the worker's, the results first try to go out with a claim
// of as many entries as they hold slots (claimAlong), so a busy worker reports and refills in
// one call.
func (w *Worker) flushResults(ctx context.Context, runs []*run) {
	if w.claimAlong(ctx, runs) {
		return
	}
	var resp wire.CompleteResponse
	err := w.retry(ctx, "report job results",
		func(err error) bool { return isLeaseExpired(err) || (len(runs) > 1 && isPermanentAPIError(err)) },
		func(ctx context.Context) error {
			req := wire.CompleteRequest{WorkerID: w.cfg.WorkerID, Results: resultsOf(runs), InFlight: w.runningIDs()}
			var err error
			resp, err = w.cfg.API.Complete(ctx, req)
			return err
		})
	switch {
	case isLeaseExpired(err):
		for _, r := range runs {
			w.log.Warn("result refused: the job's lease expired and the job was handed to another worker; dropping it",
				"job_id", r.job.ID, "attempt", r.job.Attempt, "lease_token", r.job.LeaseToken)
		}
		resp = wire.CompleteResponse{}
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
	w.settleResults(runs, resp.Outcomes, 0)
}

// resultsOf is the report of runs' results, each with its elapsed time as of now.
func resultsOf(runs []*run) []wire.JobResult {
	if len(runs) == 0 {
		return nil
	}
	out := make([]wire.JobResult, len(runs))
	for i, r := range runs {
		out[i] = r.result
		out[i].ElapsedUS = time.Since(r.began).Microseconds()
	}
	return out
}

// requeueResults hands results that a call could not report back to the results batcher.
func (w *Worker) requeueResults(runs []*run) {
	for _, r := range runs {
		w.results.Add(r)
	}
}

// settleResults ends runs whose results the API answered (outcomes): it logs what was not
// recorded, acks the entries and gives back their slots, less keep slots that the caller takes
// over for entries it read in the same round.
func (w *Worker) settleResults(runs []*run, outcomes []wire.CompleteOutcome, keep int) {
	if len(runs) == 0 {
		return
	}
	for _, o := range outcomes {
		switch o.Outcome {
		case wire.OutcomeStale:
			w.log.Info("result not recorded: the job is no longer this worker's attempt", "job_id", o.JobID,
				"status", o.Status)
		case wire.OutcomeLeaseExpired:
			w.log.Warn("result refused: the job's lease expired and the job was handed to another worker; dropping it",
				"job_id", o.JobID, "status", o.Status)
		default:
			w.log.Debug("result recorded", "job_id", o.JobID, "outcome", o.Outcome, "status", o.Status)
		}
	}
	var ds []streams.Delivery
	for _, r := range runs {
		ds = append(ds, r.deliveries...)
	}
	w.ack(ds)
	w.releaseRunsKeeping(runs, keep)
	w.afterRelease(runs)
}

// isLeaseExpired reports the API's refusal of a completion whose every result carries an
// expired lease.
func isLeaseExpired(err error) bool {
	var apiErr *client.APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict && apiErr.Code == wire.CodeLeaseExpired
}

// releaseRuns ends the runs: their slots come back and their leases are no longer renewed.
func (w *Worker) releaseRuns(runs []*run) { w.releaseRunsKeeping(runs, 0) }

// releaseRunsKeeping ends the runs but gives back keep fewer slots than they hold: the caller
// holds those from now on.
func (w *Worker) releaseRunsKeeping(runs []*run, keep int) {
	n := 0
	w.mu.Lock()
	for _, r := range runs {
		n += len(r.deliveries)
		delete(w.held, r)
	}
	w.mu.Unlock()
	w.slots.release(n - keep)
}
