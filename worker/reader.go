package worker

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

func streamsGroup(t *config.JobType) string { return streams.GroupName(t.Name) }

// read is the reader of one job type: it takes free slots, reads at most that many entries of
// the type's group, and claims them. It returns when ctx (Run's) ends. readCtx carries the Redis
// calls, which are let to finish so no entry is delivered to a reader that has gone.
//
// The count grows with the backlog (double what the last read got) and drops to one when the
// stream is idle, so an idle type holds a single slot while it blocks and the busy types keep
// the rest.
func (w *Worker) read(ctx, readCtx context.Context, t *config.JobType) {
	defer w.readers.Done()
	log := w.log.With("job_type", t.Name, "stream", t.Stream)
	want, fails := 1, 0
	for ctx.Err() == nil {
		n, err := w.slots.acquire(ctx, min(want, w.cfg.Batch))
		if err != nil {
			return
		}
		ds, err := w.readEntries(readCtx, t, n, w.cfg.Block)
		if len(ds) > n && !w.takeSlots(ctx, len(ds)-n) {
			return // shutting down: the entries stay pending, for the reclaimer
		}
		w.slots.release(max(n-len(ds), 0))
		if err != nil {
			fails++
			log.Warn("read stream failed", "error", err, "tries", fails)
			if strings.Contains(err.Error(), "NOGROUP") {
				// The stream or group was deleted (e.g. by an operator): make it again.
				if gerr := w.ensureGroups(readCtx, t); gerr != nil {
					log.Warn("recreate consumer group failed", "error", gerr)
				}
			}
			_ = sleepCtx(ctx, backoff(fails-1, w.cfg.RetryMin, w.cfg.RetryMax))
			continue
		}
		fails = 0
		want = max(1, 2*len(ds))
		if len(ds) > 0 && w.claim(ctx, t, ds) {
			_ = sleepCtx(ctx, w.cfg.RetryLaterDelay/2+jitter(w.cfg.RetryLaterDelay))
		}
	}
}

// placedStreams are the streams of t's jobs that the scheduler placed for this worker: on its
// node, and on its node for its pool (streams.NodeStream of a store.Target). None when the
// worker names no node.
func (w *Worker) placedStreams(t *config.JobType) []string {
	if w.cfg.NodeID == "" {
		return nil
	}
	out := []string{streams.NodeStream(t.Stream, w.cfg.NodeID)}
	if w.cfg.PoolID != "" {
		out = append(out, streams.NodeStream(t.Stream, store.Target(w.cfg.NodeID, w.cfg.PoolID)))
	}
	return out
}

// ensureGroups creates t's consumer group on the type's stream and on the placed ones.
func (w *Worker) ensureGroups(ctx context.Context, t *config.JobType) error {
	for _, s := range append([]string{t.Stream}, w.placedStreams(t)...) {
		if err := w.cfg.Streams.EnsureGroup(ctx, s, streamsGroup(t)); err != nil {
			return err
		}
	}
	return nil
}

// readEntries reads up to n entries of t for this worker, from the type's stream and the
// streams of the jobs the scheduler placed for it (placedStreams). A blocking read (block >= 0,
// the reader's) reads them all in one call, and, as COUNT applies to each stream, may return
// up to n a stream. A read that must not block (claim along) takes the placed jobs first, as
// they hold a reservation here, and then as many of the type's as are still wanted: at most
// n in all.
func (w *Worker) readEntries(ctx context.Context, t *config.JobType, n int, block time.Duration) ([]streams.Delivery, error) {
	p := streams.ReadParams{Group: streamsGroup(t), Consumer: w.cfg.WorkerID, Count: n, Block: block,
		Streams: []string{t.Stream}}
	placed := w.placedStreams(t)
	switch {
	case len(placed) == 0:
	case block >= 0:
		p.Streams = append(p.Streams, placed...)
	default:
		// One stream a read, each for what is still wanted: COUNT applies to each stream.
		var got []streams.Delivery
		for _, s := range append(placed, t.Stream) {
			p.Streams, p.Count = []string{s}, n-len(got)
			ds, err := w.cfg.Streams.Read(ctx, p)
			if err != nil {
				if len(got) > 0 {
					return got, nil // claim what was read; the rest waits for the next read
				}
				return nil, err
			}
			if got = append(got, ds...); len(got) == n {
				break
			}
		}
		return got, nil
	}
	return w.cfg.Streams.Read(ctx, p)
}

// takeSlots waits for n more slots; false when ctx ended first (the slots taken are given back).
func (w *Worker) takeSlots(ctx context.Context, n int) bool {
	for got := 0; got < n; {
		k, err := w.slots.acquire(ctx, n-got)
		if err != nil {
			w.slots.release(got)
			return false
		}
		got += k
	}
	return true
}

// claim claims the entries in one API call and starts the claimed jobs. The entries hold one
// slot each, which claim hands over to the jobs or gives back. It reports whether the API
// answered retry_later for some entry, so the reader backs off.
//
// Results waiting for their report ride along with the claim (the call records them first, in
// the same transaction), which saves the worker a call and the orchestrator a commit. If the
// claim cannot be made with them, they go back to their batcher and the claim is made alone.
func (w *Worker) claim(ctx context.Context, t *config.JobType, ds []streams.Delivery) (retryLater bool) {
	cb := newClaimBatch(ds)
	if len(cb.drop) > 0 {
		w.log.Warn("dropping stream entries without a job_id", "stream", t.Stream, "count", len(cb.drop))
	}
	var resp wire.ClaimResponse
	var runs []*run // the results that rode along and were recorded
	if len(cb.items) > 0 {
		runs = w.results.take()
		// The call itself must not be cut by shutdown: a claim the API made but whose answer
		// was lost leaves jobs waiting for their lease to expire.
		callCtx := context.WithoutCancel(ctx)
		var err error
		resp, err = w.claimCall(ctx, callCtx, cb.items, runs)
		if err != nil && len(runs) > 0 {
			w.requeueResults(runs)
			runs = nil
			if ctx.Err() == nil {
				w.log.Warn("claim with results failed; claiming alone, results reported on their own", "error", err)
				resp, err = w.claimCall(ctx, callCtx, cb.items, nil)
			}
		}
		if err != nil {
			// Shutting down, or the API refuses the batch itself: leave the entries pending;
			// the reclaimer resolves them against the job rows.
			w.log.Warn("claim abandoned; entries left to the reclaimer", "error", err, "count", len(ds))
			w.slots.release(len(ds))
			w.ack(cb.drop)
			return ctx.Err() == nil
		}
	}
	// The claimed jobs start (and their leases are renewed) before the results' entries are
	// acked: an ack waits on Redis, the new leases must not.
	retryLater = w.applyClaim(t, ds, cb, resp)
	w.settleResults(runs, resp.Outcomes, 0)
	return retryLater
}

// claimBatch is what a claim asks for: one item per job (duplicate entries of a job ride along
// with it, by job), and the entries that name no job.
type claimBatch struct {
	items []wire.ClaimItem
	byJob map[string][]streams.Delivery
	drop  []streams.Delivery
}

func newClaimBatch(ds []streams.Delivery) claimBatch {
	cb := claimBatch{byJob: map[string][]streams.Delivery{}}
	for _, d := range ds {
		if d.JobID == "" {
			cb.drop = append(cb.drop, d) // not an entry of ours: nothing to claim, ever
			continue
		}
		if _, dup := cb.byJob[d.JobID]; !dup {
			cb.items = append(cb.items, wire.ClaimItem{JobID: d.JobID, Stream: d.Stream, MessageID: d.ID, TraceParent: d.TraceParent})
		}
		// Duplicate entries of one job ride along and are acked with it.
		cb.byJob[d.JobID] = append(cb.byJob[d.JobID], d)
	}
	return cb
}

// claimCall makes one claim call, with the results of runs if any, retrying what a retry can
// change while ctx lasts; callCtx carries each call.
func (w *Worker) claimCall(ctx, callCtx context.Context, items []wire.ClaimItem, runs []*run) (wire.ClaimResponse, error) {
	var resp wire.ClaimResponse
	err := w.retry(ctx, "claim jobs", isRefusedBatch, func(context.Context) error {
		req := wire.ClaimRequest{
			WorkerID: w.cfg.WorkerID, PoolID: w.cfg.PoolID, NodeID: w.cfg.NodeID,
			Jobs: items, Results: resultsOf(runs), InFlight: w.runningIDs(),
		}
		var err error
		resp, err = w.cfg.API.Claim(callCtx, req)
		return err
	})
	return resp, err
}

// applyClaim starts the jobs a claim answer gave this worker and settles the other entries:
// refused ones are acked and dropped (retry_later ones kept pending, and deferred: see
// deferred.go), and their slots given back. It reports whether some entry was refused with
// retry_later.
func (w *Worker) applyClaim(t *config.JobType, ds []streams.Delivery, cb claimBatch, resp wire.ClaimResponse) (retryLater bool) {
	w.cancelJobs(resp.Cancel)
	drop := cb.drop
	claimed := map[string]bool{}
	for _, cj := range resp.Claimed {
		mine := cb.byJob[cj.JobID]
		if len(mine) == 0 || claimed[cj.JobID] {
			w.log.Error("claim answer names a job not asked for", "job_id", cj.JobID)
			continue
		}
		claimed[cj.JobID] = true
		w.deferred.remove(cj.JobID)
		w.startJob(t, cj, mine)
		w.claimed.Add(1)
	}
	for _, rf := range resp.Refused {
		mine := cb.byJob[rf.JobID]
		if len(mine) == 0 || claimed[rf.JobID] {
			continue
		}
		claimed[rf.JobID] = true // settled
		w.slots.release(len(mine))
		if rf.Reason == wire.ReasonRetryLater {
			retryLater = true
			w.deferred.add(t, rf.JobID, mine, time.Now())
			w.log.Debug("claim refused for now; entry deferred", "job_id", rf.JobID, "detail", rf.Detail)
			continue
		}
		w.deferred.remove(rf.JobID)
		w.log.Debug("claim refused; dropping entry", "job_id", rf.JobID, "reason", rf.Reason)
		drop = append(drop, mine...)
	}
	for id, mine := range cb.byJob {
		if !claimed[id] {
			w.log.Warn("claim answer does not mention a job; entry left to the reclaimer", "job_id", id)
			w.slots.release(len(mine))
		}
	}
	w.slots.release(countEmpty(ds))
	w.ack(drop)
	return retryLater
}

// isRefusedBatch reports a claim answer that repeating the batch cannot change (a 4xx other
// than an auth failure, e.g. an entry with a malformed job id): retrying it would stall the
// reader on one poison entry. Auth failures are retried, holding the batch, rather than pulling
// in more entries that cannot be claimed either.
func isRefusedBatch(err error) bool {
	return isPermanentAPIError(err) && !client.IsStatus(err, http.StatusUnauthorized) &&
		!client.IsStatus(err, http.StatusForbidden)
}

func countEmpty(ds []streams.Delivery) int {
	n := 0
	for _, d := range ds {
		if d.JobID == "" {
			n++
		}
	}
	return n
}

// ack acknowledges entries in one pipeline, retrying a few times: an entry left unacked is not
// lost, the reclaimer acks it once it sees the job is settled.
func (w *Worker) ack(ds []streams.Delivery) {
	if len(ds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(w.reportCtx, w.cfg.FlushTimeout)
	defer cancel()
	tries := 0
	err := w.retry(ctx, "ack entries", func(error) bool { tries++; return tries >= 5 }, func(ctx context.Context) error {
		return w.cfg.Streams.Ack(ctx, ds)
	})
	if err != nil {
		w.log.Error("ack entries failed; the reclaimer will settle them", "error", err, "count", len(ds))
	}
}
