package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// Audit event types of schedules. schedule.fired and schedule.skipped carry details
// {schedule_id, fire_time, reason, job_id}; the webhooks deliver schedule.skipped from the
// audit trail.
const (
	EventFired   = "schedule.fired"
	EventSkipped = "schedule.skipped"
	EventQueued  = "schedule.queued"
	EventCreated = "schedule.created"
	EventUpdated = "schedule.updated"
	EventDeleted = "schedule.deleted"
	EventPaused  = "schedule.paused"
	EventResumed = "schedule.resumed"
)

// ActorLeader is the audit actor of the firer's rows.
const ActorLeader = "leader"

// runningListMax bounds the running fires of one schedule read in one transaction: at most
// max_concurrent matter, and a schedule without a limit counts none of them.
const runningListMax = 1000

// JobGone is the job status of a fire whose job was deleted before the firer saw it end.
const JobGone = "gone"

// Engine is what firing needs of the engine (*engine.Engine has it): a submit's validation,
// and a transaction that makes jobs beside the fire's rows.
type Engine interface {
	PrepareSubmit(ctx context.Context, p engine.SubmitParams) (*engine.Prepared, error)
	SubmitTx(ctx context.Context, fence engine.Fence, fn func(tx store.Tx, sub *engine.TxSubmitter) error) ([]store.Job, error)
}

// Fired is one fire that made its job.
type Fired struct {
	ScheduleID string
	FireTime   time.Time
	JobID      string
	Reason     string
	// Lag is the time from the fire time to the job's creation.
	Lag time.Duration
}

// Outcome is what one transaction on a schedule did.
type Outcome struct {
	Fired []Fired
	// Skipped counts the skipped fire times by reason (a dropped run of missed ones counts
	// each).
	Skipped map[string]int
	Queued  int
	// Partial: the walk of missed fire times stopped at scanMax; the next transaction goes on.
	Partial bool
}

func (o *Outcome) add(p Outcome) {
	o.Fired = append(o.Fired, p.Fired...)
	for r, n := range p.Skipped {
		if o.Skipped == nil {
			o.Skipped = map[string]int{}
		}
		o.Skipped[r] += n
	}
	o.Queued += p.Queued
}

// firing is the work of one transaction on one schedule, whose row it holds locked: every
// fire time is handled once (the fire row is unique), and each row commits with its job and
// its audit row.
type firing struct {
	ctx   context.Context
	tx    store.Tx
	sub   *engine.TxSubmitter
	eng   Engine
	s     store.Schedule
	tpl   JobTemplate
	tplOK error // why the stored template cannot be read (nil: it can)
	rules Rules
	load  Load
	now   time.Time
	actor string
	// strict: a template the engine refuses fails the transaction (a manual trigger answers
	// it) instead of skipping the fire.
	strict bool
	queued []store.ScheduleFire
	events []store.AuditEvent
	out    Outcome
}

func newFiring(ctx context.Context, tx store.Tx, sub *engine.TxSubmitter, eng Engine, s store.Schedule, maxQueued int,
	now time.Time, actor string) *firing {
	f := &firing{ctx: ctx, tx: tx, sub: sub, eng: eng, s: s, rules: RulesOf(s, maxQueued), now: now, actor: actor}
	f.tpl, f.tplOK = templateOf(s.Job)
	return f
}

// loadState reads what decide needs: the schedule's running fires, whose jobs that ended it
// records as ended (with the job's status), its queued fires, and its previous job's status.
func (f *firing) loadState() error {
	running, err := f.tx.ScheduleFireList(f.ctx, store.ScheduleFireListParams{ScheduleID: f.s.ID, State: store.FireRunning,
		Limit: runningListMax})
	if err != nil {
		return err
	}
	ended, err := endedFires(f.ctx, f.tx, running)
	if err != nil {
		return err
	}
	if err := markEnded(f.ctx, f.tx, ended); err != nil {
		return err
	}
	f.load.Running = len(running) - len(ended)
	if f.queued, err = f.tx.ScheduleFireList(f.ctx, store.ScheduleFireListParams{ScheduleID: f.s.ID, State: store.FireQueued,
		Limit: runningListMax}); err != nil {
		return err
	}
	f.load.Queued = len(f.queued)
	f.load.Previous, err = previousStatus(f.ctx, f.tx, f.s)
	return err
}

// jobHolders reads who holds jobs (store.Executor has it).
type jobHolders interface {
	JobHolders(ctx context.Context, ids []string) ([]store.JobHolder, error)
}

// endedFires returns those of running whose jobs ended (or were deleted), with the job's status.
func endedFires(ctx context.Context, x jobHolders, running []store.ScheduleFire) ([]store.ScheduleFire, error) {
	if len(running) == 0 {
		return nil, nil
	}
	ids := make([]string, len(running))
	for i, fr := range running {
		ids[i] = fr.JobID
	}
	holders, err := x.JobHolders(ctx, ids)
	if err != nil {
		return nil, err
	}
	status := make(map[string]store.JobStatus, len(holders))
	for _, h := range holders {
		status[h.ID] = h.Status
	}
	var ended []store.ScheduleFire
	for _, fr := range running {
		st, ok := status[fr.JobID]
		switch {
		case !ok:
			fr.JobStatus = JobGone
		case st.Terminal():
			fr.JobStatus = string(st)
		default:
			continue
		}
		fr.State = store.FireEnded
		ended = append(ended, fr)
	}
	return ended, nil
}

// markEnded writes the fires that ended.
func markEnded(ctx context.Context, x store.Executor, ended []store.ScheduleFire) error {
	for _, fr := range ended {
		if err := x.ScheduleFireUpdate(ctx, fr); err != nil {
			return err
		}
	}
	return nil
}

// previousStatus is the status of the job of s's last fire (Load.Previous), read from its fire
// row once loadState recorded it: prevUnfinished while it runs.
func previousStatus(ctx context.Context, x store.Executor, s store.Schedule) (string, error) {
	if s.LastFireAt == nil {
		return "", nil
	}
	fr, err := x.ScheduleFireGet(ctx, s.ID, *s.LastFireAt)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return JobGone, nil
	case err != nil:
		return "", err
	case fr.State == store.FireEnded:
		return fr.JobStatus, nil
	}
	return prevUnfinished, nil
}

// dequeue handles the queued fires, oldest first: each fires when decide lets it, and the
// others wait behind the first that must.
func (f *firing) dequeue() error {
	for _, q := range f.queued {
		act, why := decide(f.rules, f.load, true)
		var err error
		switch act {
		case ActQueue:
			return nil
		case ActFire:
			err = f.fire(q.FireTime, ReasonDequeued, true)
		case ActSkip:
			err = f.skip(q.FireTime, why, "", true)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// handle decides on a new fire time and carries it out; a fire time handled already (its row
// exists: a manual trigger's, or a clock that went back) is left alone.
func (f *firing) handle(d due) error {
	if _, err := f.tx.ScheduleFireGet(f.ctx, f.s.ID, d.at); !errors.Is(err, store.ErrNotFound) {
		return err // nil: handled already
	}
	act, why := decide(f.rules, f.load, false)
	switch act {
	case ActFire:
		return f.fire(d.at, d.reason, false)
	case ActQueue:
		return f.queue(d.at)
	}
	return f.skip(d.at, why, "", false)
}

// fire makes the job of the fire at, writes its fire row (a new one, or the queued one) and
// its schedule.fired row.
func (f *firing) fire(at time.Time, reason string, queuedRow bool) error {
	jobID := JobID(f.s.ID, at)
	if f.tplOK != nil {
		return f.refused(at, queuedRow, f.tplOK)
	}
	prep, err := f.eng.PrepareSubmit(f.ctx, f.tpl.SubmitParams(jobID, Actor(f.s.ID)))
	if err != nil {
		return f.refused(at, queuedRow, err)
	}
	job, created, err := f.sub.Insert(f.ctx, prep)
	if err != nil {
		return err
	}
	if !created {
		// The fire row is unique and commits with its job, so no fire of this schedule made
		// this one: another submit took the id. It is not adopted as the fire's.
		return f.skip(at, SkipJobIDTaken, fmt.Sprintf("job %s exists and is not this schedule's (agent %s)", jobID, job.Agent), queuedRow)
	}
	firedAt := job.CreatedAt
	row := store.ScheduleFire{ScheduleID: f.s.ID, FireTime: at, State: store.FireRunning, JobID: jobID, Reason: reason,
		CreatedAt: f.now, FiredAt: &firedAt}
	if err := f.writeFire(row, queuedRow); err != nil {
		return err
	}
	if queuedRow {
		f.load.Queued--
	}
	f.load.Running++
	f.load.Previous = prevUnfinished
	f.s.LastFireAt, f.s.LastJobID = &at, jobID
	f.event(EventFired, at, reason, jobID, nil)
	f.out.Fired = append(f.out.Fired, Fired{ScheduleID: f.s.ID, FireTime: at, JobID: jobID, Reason: reason, Lag: firedAt.Sub(at)})
	return nil
}

// refused is a fire whose job the engine refused: skipped as invalid_job, or, strict, the
// transaction's error.
func (f *firing) refused(at time.Time, queuedRow bool, err error) error {
	var (
		valErr *engine.ValidationError
		unsat  *engine.UnsatisfiableError
	)
	isVal, isUnsat := errors.As(err, &valErr), errors.As(err, &unsat)
	switch {
	case f.strict && isVal:
		return jobField(valErr)
	case f.strict && isUnsat:
		return &engine.UnsatisfiableError{Field: "job." + unsat.Field, Message: unsat.Message}
	case f.strict, !isVal && !isUnsat && !errors.Is(err, f.tplOK):
		return err // not the job's fault (the database): the next pass tries again
	}
	return f.skip(at, SkipInvalidJob, err.Error(), queuedRow)
}

// skip records a skipped fire: its row and its schedule.skipped row.
func (f *firing) skip(at time.Time, reason, message string, queuedRow bool) error {
	row := store.ScheduleFire{ScheduleID: f.s.ID, FireTime: at, State: store.FireSkipped, Reason: reason, CreatedAt: f.now}
	if err := f.writeFire(row, queuedRow); err != nil {
		return err
	}
	if queuedRow {
		f.load.Queued--
	}
	extra := map[string]any{}
	if message != "" {
		extra["message"] = message
	}
	if reason == SkipPreviousFailed || reason == SkipPreviousRunning {
		extra["previous_job_id"] = f.s.LastJobID
	}
	f.event(EventSkipped, at, reason, "", extra)
	f.countSkips(reason, 1)
	return nil
}

// queue records a new fire that waits for a job of its schedule to end.
func (f *firing) queue(at time.Time) error {
	jobID := JobID(f.s.ID, at)
	if err := f.tx.ScheduleFireInsert(f.ctx, store.ScheduleFire{ScheduleID: f.s.ID, FireTime: at, State: store.FireQueued,
		JobID: jobID, CreatedAt: f.now}); err != nil {
		return err
	}
	f.load.Queued++
	f.out.Queued++
	f.event(EventQueued, at, "", jobID, nil)
	return nil
}

// dropMissed records, in one schedule.skipped row, the missed fire times a plan dropped.
func (f *firing) dropMissed(d dropped) {
	if d.count == 0 {
		return
	}
	f.event(EventSkipped, d.first, d.reason, "", map[string]any{"count": d.count, "last_fire_time": d.last})
	f.countSkips(d.reason, d.count)
}

func (f *firing) countSkips(reason string, n int) {
	if f.out.Skipped == nil {
		f.out.Skipped = map[string]int{}
	}
	f.out.Skipped[reason] += n
}

// writeFire inserts row, or updates the queued row of its fire time.
func (f *firing) writeFire(row store.ScheduleFire, queuedRow bool) error {
	if queuedRow {
		return f.tx.ScheduleFireUpdate(f.ctx, row)
	}
	return f.tx.ScheduleFireInsert(f.ctx, row)
}

// event adds an audit row of the schedule's fire at: details {schedule_id, fire_time, reason,
// job_id} and extra. A fire's job names it in job_id, so the job's events show where it came
// from.
func (f *firing) event(typ string, at time.Time, reason, jobID string, extra map[string]any) {
	details := map[string]any{"schedule_id": f.s.ID, "fire_time": at.UTC(), "reason": reason, "job_id": jobID}
	for k, v := range extra {
		details[k] = v
	}
	raw, _ := json.Marshal(details) // strings, numbers and times always marshal
	rowJob := ""
	if typ == EventFired {
		rowJob = jobID
	}
	f.events = append(f.events, store.AuditEvent{TS: f.now, EventType: typ, JobID: rowJob, Actor: f.actor, Details: raw})
}

// finish writes the schedule's row (its cursor and last fire) and the audit rows.
func (f *firing) finish() error {
	if err := f.tx.ScheduleUpdate(f.ctx, f.s); err != nil {
		return err
	}
	if len(f.events) == 0 {
		return nil
	}
	return f.tx.AuditInsert(f.ctx, f.events)
}

// jobField is a template's validation error named as the schedule's field (job.payload).
func jobField(err *engine.ValidationError) error {
	return &engine.ValidationError{Field: "job." + err.Field, Message: err.Message}
}

// fireSchedule runs one transaction on schedule id at now, behind fence: the queued fires that
// may go, then the fire times from the cursor to now (planFires), then the new cursor. A
// schedule that is paused or gone does nothing.
func fireSchedule(ctx context.Context, eng Engine, fence engine.Fence, id string, now time.Time, grace time.Duration,
	maxQueued int) (Outcome, error) {
	var out Outcome
	_, err := eng.SubmitTx(ctx, fence, func(tx store.Tx, sub *engine.TxSubmitter) error {
		out = Outcome{} // a rerun of the transaction starts again
		s, err := tx.ScheduleGet(ctx, id, true)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil // deleted since it was listed
		case err != nil:
			return err
		case s.Paused:
			return nil
		}
		f := newFiring(ctx, tx, sub, eng, s, maxQueued, now, ActorLeader)
		if err := f.loadState(); err != nil {
			return err
		}
		if err := f.dequeue(); err != nil {
			return err
		}
		if s.NextFireAt != nil && !s.NextFireAt.After(now) {
			c, err := ParseCron(s.Cron, s.Timezone)
			if err != nil {
				return fmt.Errorf("schedule %s: %w", s.ID, err) // the API checked it: a row written by hand
			}
			p := planFires(c, *s.NextFireAt, now, grace, s.CatchUp, s.CatchUpMax)
			f.dropMissed(p.drop)
			for _, d := range p.fires {
				if err := f.handle(d); err != nil {
					return err
				}
			}
			f.s.NextFireAt = timePtr(p.next)
			f.out.Partial = !p.next.IsZero() && !p.next.After(now)
		}
		out = f.out
		return f.finish()
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("fire schedule %s: %w", id, err)
	}
	return out, nil
}

// timePtr is &t, nil for the zero time.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
