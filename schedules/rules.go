package schedules

import (
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// Catch-up rules: what becomes of the fire times missed by more than the misfire grace (no
// leader ran at the time).
const (
	// CatchUpSkip drops them.
	CatchUpSkip = "skip"
	// CatchUpOnce makes one job for them all, at the latest of them.
	CatchUpOnce = "once"
	// CatchUpAll makes one job for each, up to catch_up_max (the latest ones).
	CatchUpAll = "all"
)

// Overlap rules: what a fire does while max_concurrent of its schedule's jobs are unfinished.
const (
	// OverlapSkip skips it.
	OverlapSkip = "skip"
	// OverlapQueue queues it: its job is created when one of the unfinished ones ends.
	OverlapQueue = "queue"
)

// Defaults and bounds of a schedule's rules.
const (
	CatchUpDefault    = CatchUpOnce
	CatchUpMaxDefault = 100
	CatchUpMaxLimit   = 10000
	OverlapDefault    = OverlapSkip
	// MaxConcurrentLimit bounds max_concurrent: a fire counts the running fires of its
	// schedule up to it (runningListMax).
	MaxConcurrentLimit = 1000
)

// Why a fire fired (schedule.fired's reason).
const (
	ReasonDue      = "due"      // on time, within the misfire grace
	ReasonCatchUp  = "catch_up" // missed, made by catch_up once or all
	ReasonDequeued = "dequeued" // queued, made when a job of the schedule ended
	ReasonTrigger  = "trigger"  // a manual trigger (POST /schedules/{id}/trigger)
)

// Why a fire was skipped (schedule.skipped's reason, and the skips metric's label).
const (
	// SkipMissed: missed by more than the misfire grace, dropped by catch_up skip or once.
	SkipMissed = "missed"
	// SkipCatchUpMax: missed, and older than the catch_up_max latest that catch_up all makes.
	SkipCatchUpMax = "catch_up_max"
	// SkipOverlap: max_concurrent jobs unfinished, on_overlap skip.
	SkipOverlap = "overlap"
	// SkipQueueFull: max_concurrent jobs unfinished and schedules.max_queued fires queued.
	SkipQueueFull = "queue_full"
	// SkipPreviousRunning: require_previous_success, the previous job unfinished, on_overlap
	// skip.
	SkipPreviousRunning = "previous_running"
	// SkipPreviousFailed: require_previous_success, the previous job did not end done.
	SkipPreviousFailed = "previous_failed"
	// SkipInvalidJob: the template is no longer a valid submit (its type was removed from the
	// configuration, say); the audit row says why.
	SkipInvalidJob = "invalid_job"
	// SkipJobIDTaken: a job of the fire's id exists that the schedule did not make (made
	// before engine.ScheduleJobPrefix was reserved); it is not taken for the fire's.
	SkipJobIDTaken = "job_id_taken"
)

// SkipReasons are every skip reason, for the metric's series.
var SkipReasons = []string{SkipMissed, SkipCatchUpMax, SkipOverlap, SkipQueueFull, SkipPreviousRunning,
	SkipPreviousFailed, SkipInvalidJob, SkipJobIDTaken}

// scanMax bounds the fire times one plan walks: a dense schedule missed for long (every second
// for weeks) is planned in parts of this many, each dropped but the last.
const scanMax = 100_000

// due is a fire time to handle on its own, and why it fires.
type due struct {
	at     time.Time
	reason string
}

// dropped is the fire times a plan drops without a row each: one audit row says how many.
type dropped struct {
	reason      string
	count       int
	first, last time.Time
}

// plan is what one pass does with a schedule's fire times from its cursor to now.
type plan struct {
	// fires are handled one by one, oldest first: each fires, queues or is skipped.
	fires []due
	// drop are the missed fire times left without a job (count 0: none).
	drop dropped
	// next is the new cursor: the first fire time not walked (after now, unless the walk
	// stopped at scanMax); zero when the schedule never fires again.
	next time.Time
}

// planFires walks the fire times of c from cursor (a fire time not handled yet) to now. Those
// within grace of now fire (due); the older ones were missed, and catchUp says what becomes of
// them: skip drops them, once fires the latest, all fires the latest catchUpMax and drops the
// others. A walk stopped by scanMax (partial) drops everything it walked: the latest missed
// fire times are in a later part.
func planFires(c *Cron, cursor, now time.Time, grace time.Duration, catchUp string, catchUpMax int) plan {
	keep := 0
	switch catchUp {
	case CatchUpOnce:
		keep = 1
	case CatchUpAll:
		keep = max(catchUpMax, 1)
	}
	var (
		p      plan
		onTime []due
		missed = newRing(keep)
		t      = cursor
	)
	for n := 0; !t.IsZero() && !t.After(now); n++ {
		if n == scanMax {
			p.next = t
			p.drop = dropFor(catchUp, missed.count, missed.first, missed.last)
			return p
		}
		if now.Sub(t) <= grace {
			onTime = append(onTime, due{at: t, reason: ReasonDue})
		} else {
			missed.add(t)
		}
		t = c.Next(t)
	}
	p.next = t
	kept := missed.items()
	p.drop = dropFor(catchUp, missed.count-len(kept), missed.first, missed.droppedLast)
	for _, at := range kept {
		p.fires = append(p.fires, due{at: at, reason: ReasonCatchUp})
	}
	p.fires = append(p.fires, onTime...)
	return p
}

// dropFor is the record of count missed fire times dropped under catchUp.
func dropFor(catchUp string, count int, first, last time.Time) dropped {
	if count <= 0 {
		return dropped{}
	}
	reason := SkipMissed
	if catchUp == CatchUpAll {
		reason = SkipCatchUpMax
	}
	return dropped{reason: reason, count: count, first: first, last: last}
}

// ring keeps the latest n of the times added (a circular buffer), counts them all, and
// remembers the first and the latest that fell out (or was never kept).
type ring struct {
	buf                []time.Time
	n, head, count     int
	first, droppedLast time.Time
	last               time.Time
}

func newRing(n int) *ring { return &ring{n: n} }

func (r *ring) add(t time.Time) {
	if r.count == 0 {
		r.first = t
	}
	r.count++
	r.last = t
	switch {
	case r.n == 0:
		r.droppedLast = t
	case len(r.buf) < r.n:
		r.buf = append(r.buf, t)
	default:
		r.droppedLast = r.buf[r.head]
		r.buf[r.head] = t
		r.head = (r.head + 1) % r.n
	}
}

// items are the kept times, oldest first.
func (r *ring) items() []time.Time {
	return append(append([]time.Time(nil), r.buf[r.head:]...), r.buf[:r.head]...)
}

// Rules are the overlap rules of a schedule, as decide reads them.
type Rules struct {
	MaxConcurrent          int
	OnOverlap              string
	RequirePreviousSuccess bool
	// MaxQueued is the most fires a schedule may have queued (schedules.max_queued).
	MaxQueued int
}

// RulesOf are s's rules, with the configured queue bound.
func RulesOf(s store.Schedule, maxQueued int) Rules {
	return Rules{MaxConcurrent: s.MaxConcurrent, OnOverlap: s.OnOverlap, RequirePreviousSuccess: s.RequirePreviousSuccess,
		MaxQueued: maxQueued}
}

// prevUnfinished is the previous job's status while it has not ended.
const prevUnfinished = "unfinished"

// Load is what decide reads of a schedule at the moment of a fire.
type Load struct {
	// Running counts the schedule's jobs that are not known to have ended.
	Running int
	// Queued counts its queued fires.
	Queued int
	// Previous is the status of the job of its previous fire: "" before the first,
	// prevUnfinished while that job has not ended, else its terminal status ("gone" when it
	// was deleted unseen).
	Previous string
}

// Action is what a fire does.
type Action int

// Actions of decide.
const (
	// ActFire creates the fire's job now.
	ActFire Action = iota
	// ActQueue queues the fire (a new one), or keeps it queued (a queued one).
	ActQueue
	// ActSkip skips it.
	ActSkip
)

// decide says what a fire does under r at load l, and why when it is skipped. queued says the
// fire is queued already: it stays so while it must wait, whatever the queue's length.
//
// With require_previous_success, a fire whose previous job did not end done is skipped
// (previous_failed), and while that job is unfinished the fire waits as an overlap does: it is
// queued under on_overlap queue, skipped (previous_running) under skip. Then max_concurrent: a
// fire that would make more unfinished jobs than that is queued (on_overlap queue, up to
// MaxQueued fires queued, then skipped as queue_full) or skipped (overlap).
func decide(r Rules, l Load, queued bool) (Action, string) {
	busy := ""
	switch {
	case !r.RequirePreviousSuccess || l.Previous == "" || l.Previous == string(store.JobDone):
	case l.Previous == prevUnfinished:
		busy = SkipPreviousRunning
	default:
		return ActSkip, SkipPreviousFailed
	}
	if busy == "" && r.MaxConcurrent > 0 && l.Running >= r.MaxConcurrent {
		busy = SkipOverlap
	}
	switch {
	case busy == "":
		return ActFire, ""
	case r.OnOverlap != OverlapQueue:
		return ActSkip, busy
	case queued || l.Queued < r.MaxQueued:
		return ActQueue, ""
	}
	return ActSkip, SkipQueueFull
}
