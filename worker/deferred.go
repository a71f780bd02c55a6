package worker

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/streams"
)

// Deferred entries. A claim refused with retry_later (the job's GPUs do not fit on this node
// now) leaves its entry pending in this worker's name, and nothing else looks at it until the
// reclaimer takes it over after claim_idle: a GPU freed meanwhile would stay idle that long. So
// the worker keeps such entries and claims them again as soon as it has reported a result of its
// own (which releases that job's lease, and so its GPU memory), again once it has reported the
// node's memory after that (afterRelease), and otherwise after a backoff from deferRetryMin
// doubling to deferRetryMax while they are still refused. An entry kept for
// deferKeep is left to the reclaimer, as any entry left pending is: by then another node may
// have room, and the reclaimer hands the job on.
const (
	deferRetryMin = 250 * time.Millisecond
	deferRetryMax = 5 * time.Second
	// deferKeep stays under the default claim_idle (60 s), so the worker lets go of an entry
	// before the reclaimer takes it over.
	deferKeep = 30 * time.Second
)

// deferredEntry is the entries of one job refused with retry_later, and since when.
type deferredEntry struct {
	t     *config.JobType
	ds    []streams.Delivery
	since time.Time
}

// deferrals are the worker's deferred entries by job id.
type deferrals struct {
	mu      sync.Mutex
	entries map[string]deferredEntry
	wake    chan struct{}
}

func newDeferrals() *deferrals {
	return &deferrals{entries: map[string]deferredEntry{}, wake: make(chan struct{}, 1)}
}

// add keeps the entries ds of job id, refused with retry_later at now; a job kept already keeps
// its first time.
func (d *deferrals) add(t *config.JobType, id string, ds []streams.Delivery, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.entries[id]; ok {
		now = e.since
	}
	d.entries[id] = deferredEntry{t: t, ds: ds, since: now}
}

// remove forgets job id (claimed, or refused for good).
func (d *deferrals) remove(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.entries, id)
}

// any reports whether an entry is kept.
func (d *deferrals) any() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries) > 0
}

// poke asks for a try soon, when an entry is kept.
func (d *deferrals) poke() {
	if !d.any() {
		return
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// due returns the kept entries by job type, in the order they should have the room (see
// byPriority), and forgets those kept past deferKeep.
func (d *deferrals) due(now time.Time) map[*config.JobType][]streams.Delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[*config.JobType][]streams.Delivery{}
	for id, e := range d.entries {
		if now.Sub(e.since) >= deferKeep {
			delete(d.entries, id)
			continue
		}
		out[e.t] = append(out[e.t], e.ds...)
	}
	for _, ds := range out {
		byPriority(ds, now)
	}
	return out
}

// priorityAging is how long an entry waits for each level its priority rises by.
const priorityAging = time.Minute

// byPriority orders entries for the room that frees: the highest effective priority first, and
// the oldest first within a level. A job's effective priority is its priority plus one level
// per priorityAging since it was published, at most 9: a job of priority 0 that has waited
// nine minutes goes before any new one. A claim places its jobs in the order it lists them.
func byPriority(ds []streams.Delivery, now time.Time) {
	effective := func(d streams.Delivery) int {
		p := d.Priority
		if at, ok := streams.EntryTime(d.ID); ok && now.After(at) {
			p += int(now.Sub(at) / priorityAging)
		}
		return min(p, 9)
	}
	slices.SortStableFunc(ds, func(a, b streams.Delivery) int {
		if c := cmp.Compare(effective(b), effective(a)); c != 0 {
			return c
		}
		ta, _ := streams.EntryTime(a.ID)
		tb, _ := streams.EntryTime(b.ID)
		return ta.Compare(tb)
	})
}

// afterRelease is called once the results of runs were recorded, which released their leases:
// with entries deferred, they try at once (the reservations are gone); with entries deferred
// or GPU leases released, the renewer reports the node's memory now (what the jobs used is
// free: the scheduler places the jobs waiting for it), after which deferred entries try again.
func (w *Worker) afterRelease(runs []*run) {
	deferred := w.deferred.any()
	if !deferred && !slices.ContainsFunc(runs, func(r *run) bool { return r.job.GPUIndex != nil }) {
		return
	}
	if deferred {
		w.deferred.poke()
	}
	select {
	case w.renewNow <- struct{}{}:
	default:
	}
}

// retryDeferred claims the deferred entries again, with the slots that are free, whenever a
// result was reported (poke) and after the backoff; it returns when ctx ends.
func (w *Worker) retryDeferred(ctx context.Context) {
	defer w.readers.Done()
	delay := deferRetryMin
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.deferred.wake:
			delay = deferRetryMin
		case <-timer.C:
		}
		refused := false
		for t, ds := range w.deferred.due(time.Now()) {
			n := w.slots.tryAcquire(len(ds))
			if n == 0 {
				continue // every slot is busy: the job that frees one reports, and pokes
			}
			if w.claim(ctx, t, ds[:n]) {
				refused = true
			}
		}
		if refused {
			delay = min(2*delay, deferRetryMax)
		}
		timer.Reset(delay/2 + jitter(delay/2))
	}
}
