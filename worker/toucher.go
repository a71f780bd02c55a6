package worker

import (
	"context"
	"time"

	"github.com/gpuorch/orchestrator/streams"
)

// Bounds of one touch call (toucher.timeout).
const (
	// touchTimeoutMax bounds a touch however long TouchInterval is: a Redis that does not
	// answer within it is hung or gone, and waiting longer only delays the next touch.
	touchTimeoutMax = 2 * time.Second
	// touchTimeoutMin keeps a very short TouchInterval (tests) from failing touches that are
	// merely slow on a busy machine.
	touchTimeoutMin = 250 * time.Millisecond
)

// toucher resets the idle time of the in-flight jobs' stream entries (XCLAIM … JUSTID to the
// worker itself) so that the reclaimer leaves them alone. It runs apart from the lease renewals:
// the renewer kicks it after each renewal and never waits for it, so a Redis that hangs costs
// no lease (the leases live in the database; the entries' idle time is only what makes the
// reclaimer look at a job, and it rescues nothing whose lease is alive).
//
// One touch is in flight at most; kicks that come meanwhile are folded into the next one. Each
// touch has its own deadline (timeout). A failed touch is a warning once per outage, and its
// recovery is logged; the failures in between are debug lines.
type toucher struct {
	w    *Worker
	kick chan struct{}

	// failing counts the consecutive failed touches; failingSince is when the first failed.
	failing      int
	failingSince time.Time
}

func newToucher(w *Worker) *toucher {
	return &toucher{w: w, kick: make(chan struct{}, 1)}
}

// poke asks for a touch without waiting: a touch already asked for covers this one too.
func (t *toucher) poke() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// run touches once per kick until ctx ends.
func (t *toucher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
		}
		t.touchOnce(ctx)
	}
}

// timeout is the deadline of one touch: TouchInterval (a touch later than that is late
// anyway), within [touchTimeoutMin, touchTimeoutMax].
func (t *toucher) timeout() time.Duration {
	d := touchTimeoutMax
	if ti := t.w.cfg.TouchInterval; ti > 0 {
		d = min(d, ti)
	}
	return max(d, touchTimeoutMin)
}

// touchOnce touches the entries of the runs held whose leases are not gone.
func (t *toucher) touchOnce(ctx context.Context) {
	w := t.w
	var ds []streams.Delivery
	w.mu.Lock()
	for r := range w.held {
		if !r.leaseGone.Load() {
			ds = append(ds, r.deliveries...)
		}
	}
	w.mu.Unlock()
	if len(ds) == 0 {
		return
	}
	tctx, cancel := context.WithTimeout(ctx, t.timeout())
	err := w.cfg.Streams.Touch(tctx, w.cfg.WorkerID, ds)
	cancel()
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		t.failing++
		if t.failing == 1 {
			t.failingSince = time.Now()
			w.log.Warn("touch in-flight entries failed; leases are renewed regardless, and touches go on "+
				"(further failures are logged at debug level until one succeeds)",
				"error", err, "count", len(ds), "timeout", t.timeout().String())
		} else {
			w.log.Debug("touch in-flight entries failed again", "error", err, "count", len(ds), "failures", t.failing)
		}
	case t.failing > 0:
		w.log.Info("touch in-flight entries recovered", "failures", t.failing,
			"failing_for", time.Since(t.failingSince).Round(time.Millisecond).String())
		t.failing = 0
	}
}
