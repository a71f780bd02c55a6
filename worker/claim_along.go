package worker

import (
	"context"
	"time"
)

// claimAlong reports runs' results together with a claim of the entries waiting in a stream of
// the worker's, in one call and one transaction, and hands the slots the runs free to the new
// entries. It reports whether it did; when it did not (nothing waiting, shutting down, or the
// call failed), the caller reports the results alone.
//
// A worker whose every slot is taken otherwise spends two calls a round: the results free the
// slots, then the reader, woken by them, claims. Here the round is one call, and the reader
// stays asleep while the results keep the slots busy. The entries are read without blocking,
// for at most as many slots as the runs hold, from one job type's stream at a time, taken in
// turn so that a busy type does not keep the slots from the others.
func (w *Worker) claimAlong(ctx context.Context, runs []*run) bool {
	if ctx.Err() != nil || w.closing.Load() || time.Now().UnixNano() < w.alongPausedUntil.Load() || w.deferred.any() {
		// With entries deferred, the room these results free is theirs first (deferred.go).
		return false
	}
	n := 0
	for _, r := range runs {
		n += len(r.deliveries)
	}
	n = min(n, w.cfg.Batch)
	if n == 0 || len(w.cfg.Types) == 0 {
		return false
	}
	t := w.cfg.Types[int(w.alongTurn.Add(1))%len(w.cfg.Types)]
	ds, err := w.readEntries(ctx, t, n, -1)
	if err != nil {
		w.log.Debug("read along with results failed; reporting them alone", "stream", t.Stream, "error", err)
		return false
	}
	cb := newClaimBatch(ds)
	if len(cb.items) == 0 {
		w.ack(cb.drop)
		return false
	}
	resp, err := w.claimCall(ctx, ctx, cb.items, runs)
	if err != nil {
		// Nothing of the call was recorded. The results are reported alone; the entries stay
		// pending in this worker's name until the reclaimer resolves them.
		w.log.Warn("claim along with results failed; entries left to the reclaimer", "error", err,
			"count", len(ds), "stream", t.Stream)
		w.ack(cb.drop)
		return false
	}
	// The claimed jobs start (and their leases are renewed) before the results' entries are
	// acked: an ack waits on Redis, the new leases must not. The runs keep the slots the new
	// jobs take over until they are settled.
	if w.applyClaim(t, ds, cb, resp) {
		// Some job had no room (retry_later): leave that type to its reader's backoff.
		w.alongPausedUntil.Store(time.Now().Add(w.cfg.RetryLaterDelay).UnixNano())
	}
	w.settleResults(runs, resp.Outcomes, len(ds))
	return true
}
