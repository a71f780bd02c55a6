package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuorch/orchestrator/client"
)

// Settings of the batch fill of the backlog scenario.
const (
	// fillSenders is how many POST /jobs/submit_batch the fill has in flight at once.
	fillSenders = 4
	// fillRetries is how often a batch that failed whole is sent again before the fill stops.
	fillRetries = 3
	// fillBackoff is the first retry's delay after a failed batch (doubled each time); every
	// wait, a refused job's retry_after_ms too, is lengthened by up to 50% at random.
	fillBackoff = 200 * time.Millisecond
	// fillStalls is how many answers in a row may admit none of a batch's jobs (admission
	// control refuses them all: a queue or pending cap is full) before the fill stops.
	fillStalls = 50
)

// batchCount is how many batches of client.SubmitBatchMax jobs n jobs take.
func batchCount(n int) int { return (n + client.SubmitBatchMax - 1) / client.SubmitBatchMax }

// fill submits n jobs, ids.id(from) to ids.id(from+n-1), in batches of client.SubmitBatchMax
// with senders concurrent POST /jobs/submit_batch, recording into ls (of batchCount(n)
// entries): accepted counts the jobs that exist afterwards (created, or found on a retry), lat
// the latency of each batch's first answer, errs the jobs refused ("job_<code>"), the batches
// that failed whole, and what was sent again ("retried_<code>"). A batch that failed whole
// with a transient error is sent again with the same ids (a repeated job_id answers the
// existing job); after fillRetries of those, or on a permanent error (a 4xx: the endpoint is
// missing, the body too large), the fill stops and returns the error. It also stops early when
// ctx ends.
func (s submitter) fill(ctx context.Context, ls *loadStats, ids idSpace, from, n, senders int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := batchCount(n)
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		stopOnce sync.Once
		stopErr  error
	)
	ls.start = time.Now()
	for range senders {
		wg.Go(func() {
			for ctx.Err() == nil {
				b := int(next.Add(1) - 1)
				if b >= batches {
					return
				}
				lo := b * client.SubmitBatchMax
				req := s.batch(ids, from+lo, min(client.SubmitBatchMax, n-lo))
				if err := s.sendBatch(ctx, ls, b, req); err != nil {
					stopOnce.Do(func() { stopErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	ls.end = time.Now()
	return stopErr
}

// batch returns the request of the k jobs from index first.
func (s submitter) batch(ids idSpace, first, k int) client.SubmitBatchRequest {
	jobs := make([]client.SubmitRequest, k)
	for i := range jobs {
		jobs[i] = client.SubmitRequest{JobID: ids.id(first + i), Type: s.jobType, Agent: benchAgent, Payload: s.payload}
	}
	return client.SubmitBatchRequest{Jobs: jobs}
}

// sendBatch sends batch b and records its outcome in ls. A batch that failed whole with a
// transient error is sent again, up to fillRetries times, after a backoff; the jobs admission
// control refused (retry_after_ms set) are sent again after the longest of their delays, until
// fillStalls answers in a row admitted none. It returns an error when the batch could not be
// sent.
func (s submitter) sendBatch(ctx context.Context, ls *loadStats, b int, req client.SubmitBatchRequest) error {
	failures, stalls := 0, 0
	for {
		t0 := time.Now()
		resp, err := s.api.SubmitBatch(ctx, req)
		var (
			wait    time.Duration
			refusal error
		)
		switch {
		case err == nil:
			if ls.lat[b] == 0 {
				ls.lat[b] = max(time.Since(t0), time.Nanosecond)
			}
			ls.accepted.Add(int64(resp.Created + resp.Existing))
			if stalls++; resp.Created+resp.Existing > 0 {
				stalls = 0
			}
			req.Jobs, wait, refusal = refusedAgain(ls, req.Jobs, resp.Results)
			switch {
			case len(req.Jobs) == 0:
				return nil
			case stalls == fillStalls:
				ls.failN("stalled", len(req.Jobs), refusal)
				return fmt.Errorf("submit batch %d: %d answers in a row admitted none of its %d remaining jobs: %w",
					b, fillStalls, len(req.Jobs), refusal)
			}
		case ctx.Err() != nil:
			return nil // the fill was stopped: not an error of this batch
		case !retryable(err) || failures == fillRetries:
			ls.failN(errorCode(err), len(req.Jobs), err)
			return fmt.Errorf("submit batch %d (%d jobs, attempt %d): %w", b, len(req.Jobs), failures+1, err)
		default:
			failures++
			ls.retried(errorCode(err), err)
			wait = fillBackoff << (failures - 1)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait + rand.N(wait/2+1)):
		}
	}
}

// refusedAgain records the per-job results of an answered batch of jobs: it returns the jobs
// that admission control refused for now (to send again), the longest of their delays and the
// first of their refusals; the jobs refused for good count as failed.
func refusedAgain(ls *loadStats, jobs []client.SubmitRequest, results []client.SubmitBatchResult) (again []client.SubmitRequest, wait time.Duration, refusal error) {
	for i, r := range results {
		if r.Error == nil || i >= len(jobs) {
			continue
		}
		err := fmt.Errorf("job %s refused: %s: %s", r.JobID, r.Error.Code, r.Error.Message)
		if r.RetryAfterMS > 0 {
			again = append(again, jobs[i])
			if refusal == nil {
				refusal = err
			}
			wait = max(wait, time.Duration(r.RetryAfterMS)*time.Millisecond)
			ls.retried("job_"+r.Error.Code, err)
			continue
		}
		ls.failN("job_"+r.Error.Code, 1, err)
	}
	return again, wait, refusal
}

// retried counts a batch or job sent again after err under "retried_<code>": nothing failed
// (yet).
func (ls *loadStats) retried(code string, err error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.errs["retried_"+code]++
	if ls.firstErr == nil {
		ls.firstErr = err
	}
}

// retryable reports whether a request that failed may succeed when sent again: a transport
// error, a 429 or a 5xx. Other 4xx answers are the same every time.
func retryable(err error) bool {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode == http.StatusTooManyRequests || apiErr.StatusCode >= http.StatusInternalServerError
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
