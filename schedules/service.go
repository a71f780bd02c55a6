// Package schedules creates jobs on a schedule (docs/architecture.md, "Schedules"): a schedule
// is a cron expression in a time zone, a job template, and the rules of its fires (catch-up,
// overlap, previous success).
//
// The Service manages schedules for the API on any instance. The Firer, a leader loop, makes
// the fires: each fire time of a schedule is a row unique on (schedule, fire time), written
// in the transaction that makes its job and its audit row, fenced by the leader's term, so
// that no failover makes a fire twice nor leaves one without its job.
package schedules

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// NextRunsShown is how many next fire times a schedule's view lists.
const NextRunsShown = 5

// Spec is a schedule as it is created or replaced: what it does, not where its fires are.
type Spec struct {
	ID                     string
	Cron                   string
	Timezone               string
	Job                    JobTemplate
	CatchUp                string
	CatchUpMax             int
	MaxConcurrent          int
	OnOverlap              string
	RequirePreviousSuccess bool
	Paused                 bool
}

// SpecOf is the spec of a stored schedule.
func SpecOf(s store.Schedule) (Spec, error) {
	tpl, err := templateOf(s.Job)
	if err != nil {
		return Spec{}, err
	}
	return Spec{ID: s.ID, Cron: s.Cron, Timezone: s.Timezone, Job: tpl, CatchUp: s.CatchUp, CatchUpMax: s.CatchUpMax,
		MaxConcurrent: s.MaxConcurrent, OnOverlap: s.OnOverlap, RequirePreviousSuccess: s.RequirePreviousSuccess,
		Paused: s.Paused}, nil
}

// View is a schedule as GET /schedules shows it.
type View struct {
	store.Schedule
	Spec Spec
	// NextRuns are the next fire times after now, in the schedule's zone (none while paused).
	NextRuns []time.Time
	// LastJobStatus is the status of the job of the last fire ("" before the first; "gone"
	// once deleted).
	LastJobStatus string
	// Running and Queued count its fires whose jobs are not known to have ended, and those
	// queued (filled by Get only).
	Running, Queued int
	// LastSkip is its latest skipped fire (Get only; nil when none is kept). Missed fire times
	// that catch_up dropped have no fire row: the audit trail and the skips metric count them.
	LastSkip *store.ScheduleFire
}

// Service manages schedules. It is safe for concurrent use.
type Service struct {
	st  store.Store
	eng Engine
	cfg *config.Config
	now func() time.Time
}

// NewService returns the service over st, validating templates and making manual fires with
// eng. now is the clock (nil: time.Now).
func NewService(st store.Store, eng Engine, cfg *config.Config, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{st: st, eng: eng, cfg: cfg, now: now}
}

func (s *Service) nowUTC() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// check validates sp and fills its defaults; the errors name the field (job.payload). It
// returns the parsed cron.
func (s *Service) check(ctx context.Context, sp *Spec) (*Cron, error) {
	if !IDPattern.MatchString(sp.ID) {
		return nil, invalid("id", "must be %s", IDPattern.Rule())
	}
	sp.Timezone = cmp.Or(sp.Timezone, "UTC")
	c, err := ParseCron(sp.Cron, sp.Timezone)
	if err != nil {
		return nil, err
	}
	if c.Next(s.now()).IsZero() {
		return nil, invalid("cron", "%q never fires", sp.Cron)
	}
	sp.CatchUp = cmp.Or(sp.CatchUp, CatchUpDefault)
	sp.CatchUpMax = cmp.Or(sp.CatchUpMax, CatchUpMaxDefault)
	sp.OnOverlap = cmp.Or(sp.OnOverlap, OverlapDefault)
	switch {
	case sp.CatchUp != CatchUpSkip && sp.CatchUp != CatchUpOnce && sp.CatchUp != CatchUpAll:
		return nil, invalid("catch_up", "must be skip, once or all, not %q", sp.CatchUp)
	case sp.CatchUpMax < 1 || sp.CatchUpMax > CatchUpMaxLimit:
		return nil, invalid("catch_up_max", "must be in 1..%d", CatchUpMaxLimit)
	case sp.MaxConcurrent < 0 || sp.MaxConcurrent > MaxConcurrentLimit:
		return nil, invalid("max_concurrent", "must be in 0..%d (0: no limit)", MaxConcurrentLimit)
	case sp.OnOverlap != OverlapSkip && sp.OnOverlap != OverlapQueue:
		return nil, invalid("on_overlap", "must be skip or queue, not %q", sp.OnOverlap)
	}
	// The template is a submit: the engine's checks, each error named under job.
	_, err = s.eng.PrepareSubmit(ctx, sp.Job.SubmitParams(JobID(sp.ID, time.Unix(0, 0)), Actor(sp.ID)))
	var (
		valErr *engine.ValidationError
		unsat  *engine.UnsatisfiableError
	)
	switch {
	case errors.As(err, &valErr):
		return nil, jobField(valErr)
	case errors.As(err, &unsat):
		return nil, &engine.UnsatisfiableError{Field: "job." + unsat.Field, Message: unsat.Message}
	case err != nil:
		return nil, err
	}
	return c, nil
}

// row is the stored row of sp, whose next fire is the first after now (none while paused).
func row(sp Spec, c *Cron, now time.Time) (store.Schedule, error) {
	job, err := json.Marshal(sp.Job)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("encode the job template: %w", err)
	}
	r := store.Schedule{ID: sp.ID, Agent: sp.Job.Agent, Cron: sp.Cron, Timezone: sp.Timezone, Job: job, CatchUp: sp.CatchUp,
		CatchUpMax: sp.CatchUpMax, MaxConcurrent: sp.MaxConcurrent, OnOverlap: sp.OnOverlap,
		RequirePreviousSuccess: sp.RequirePreviousSuccess, Paused: sp.Paused, UpdatedAt: now}
	if !sp.Paused {
		r.NextFireAt = timePtr(c.Next(now))
	}
	return r, nil
}

// Create validates sp, fills its defaults and stores it; store.ErrConflict when its id is
// taken. Its first fire is the first fire time after now. Audited schedule.created.
func (s *Service) Create(ctx context.Context, sp Spec, actor string) (View, error) {
	c, err := s.check(ctx, &sp)
	if err != nil {
		return View{}, err
	}
	now := s.nowUTC()
	r, err := row(sp, c, now)
	if err != nil {
		return View{}, err
	}
	r.CreatedBy, r.CreatedAt = actor, now
	err = s.st.WithTx(ctx, func(tx store.Tx) error {
		if err := tx.ScheduleInsert(ctx, r); err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{adminEvent(EventCreated, r, actor, now)})
	})
	if err != nil {
		return View{}, fmt.Errorf("create schedule %s: %w", sp.ID, err)
	}
	return s.view(ctx, r, false)
}

// Update applies change to the schedule's spec and stores the result, under the row's lock
// (concurrent updates do not lose each other's changes). A schedule whose cron or zone
// changed, or that is resumed, starts again from now: its next fire is the first after now,
// and the fire times passed meanwhile are not caught up. Audited as event (schedule.updated,
// .paused or .resumed).
func (s *Service) Update(ctx context.Context, id, actor string, change func(*Spec) error) (View, error) {
	var out store.Schedule
	err := s.st.WithTx(ctx, func(tx store.Tx) error {
		cur, err := tx.ScheduleGet(ctx, id, true)
		if err != nil {
			return err
		}
		sp, err := SpecOf(cur)
		if err != nil {
			return err
		}
		if err := change(&sp); err != nil {
			return err
		}
		if sp.ID != id {
			return invalid("id", "cannot be changed (it is %q)", id)
		}
		c, err := s.check(ctx, &sp)
		if err != nil {
			return err
		}
		now := s.nowUTC()
		next, err := row(sp, c, now)
		if err != nil {
			return err
		}
		next.CreatedBy, next.CreatedAt, next.LastFireAt, next.LastJobID = cur.CreatedBy, cur.CreatedAt, cur.LastFireAt, cur.LastJobID
		if !sp.Paused && !cur.Paused && sp.Cron == cur.Cron && sp.Timezone == cur.Timezone {
			next.NextFireAt = cur.NextFireAt // the same fire times: the cursor stays
		}
		ev := EventUpdated
		switch {
		case sp.Paused && !cur.Paused:
			ev = EventPaused
		case !sp.Paused && cur.Paused:
			ev = EventResumed
		}
		if err := tx.ScheduleUpdate(ctx, next); err != nil {
			return err
		}
		out = next
		return tx.AuditInsert(ctx, []store.AuditEvent{adminEvent(ev, next, actor, now)})
	})
	if err != nil {
		return View{}, fmt.Errorf("update schedule %s: %w", id, err)
	}
	return s.view(ctx, out, false)
}

// SetPaused pauses or resumes a schedule (Update of its paused flag). A paused schedule does
// not fire (a manual trigger still does); its queued fires wait.
func (s *Service) SetPaused(ctx context.Context, id string, paused bool, actor string) (View, error) {
	return s.Update(ctx, id, actor, func(sp *Spec) error {
		sp.Paused = paused
		return nil
	})
}

// Delete deletes a schedule and its fires; the jobs it made stay. Audited schedule.deleted.
func (s *Service) Delete(ctx context.Context, id, actor string) error {
	err := s.st.WithTx(ctx, func(tx store.Tx) error {
		cur, err := tx.ScheduleGet(ctx, id, true)
		if err != nil {
			return err
		}
		if err := tx.ScheduleDelete(ctx, id); err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{adminEvent(EventDeleted, cur, actor, s.nowUTC())})
	})
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	return nil
}

// Get returns the view of one schedule, with its running and queued counts.
func (s *Service) Get(ctx context.Context, id string) (View, error) {
	r, err := s.st.ScheduleGet(ctx, id, false)
	if err != nil {
		return View{}, err
	}
	return s.view(ctx, r, true)
}

// List returns a page of schedules by id (of one agent when agent is set), after the id
// after.
func (s *Service) List(ctx context.Context, agent, after string, limit int) ([]View, error) {
	rows, err := s.st.ScheduleList(ctx, store.ScheduleListParams{Agent: agent, After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(rows))
	for _, r := range rows {
		v, err := s.view(ctx, r, false)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Trigger fires the schedule now, whatever its rules and even while it is paused: an
// operator's explicit request. Its fire time is now (with its microseconds, so never a cron
// fire time), returned in the schedule's zone, and it counts as the schedule's last fire. A template the engine refuses now
// (its type was removed, say) is the answer's error.
func (s *Service) Trigger(ctx context.Context, id, actor string) (Fired, error) {
	var fired Fired
	_, err := s.eng.SubmitTx(ctx, nil, func(tx store.Tx, sub *engine.TxSubmitter) error {
		cur, err := tx.ScheduleGet(ctx, id, true)
		if err != nil {
			return err
		}
		now := s.nowUTC()
		at := now
		if at.Nanosecond() == 0 {
			at = at.Add(time.Microsecond)
		}
		for {
			if _, err := tx.ScheduleFireGet(ctx, id, at); errors.Is(err, store.ErrNotFound) {
				break
			} else if err != nil {
				return err
			}
			at = at.Add(time.Microsecond)
		}
		f := newFiring(ctx, tx, sub, s.eng, cur, s.cfg.Schedules.MaxQueued, now, actor)
		f.strict = true
		if err := f.fire(at, ReasonTrigger, false); err != nil {
			return err
		}
		fired = f.out.Fired[0]
		if loc, err := ParseTimezone(cur.Timezone); err == nil {
			fired.FireTime = fired.FireTime.In(loc)
		}
		return f.finish()
	})
	if err != nil {
		return Fired{}, fmt.Errorf("trigger schedule %s: %w", id, err)
	}
	return fired, nil
}

// view is r as the API shows it; counts reads its fires' counts.
func (s *Service) view(ctx context.Context, r store.Schedule, counts bool) (View, error) {
	sp, err := SpecOf(r)
	if err != nil {
		return View{}, fmt.Errorf("schedule %s: %w", r.ID, err)
	}
	v := View{Schedule: r, Spec: sp}
	if c, err := ParseCron(r.Cron, r.Timezone); err == nil && !r.Paused {
		v.NextRuns = c.NextRuns(s.now(), NextRunsShown)
	}
	if r.LastJobID != "" {
		if v.LastJobStatus, err = s.lastJobStatus(ctx, r); err != nil {
			return View{}, err
		}
	}
	if counts {
		n, err := s.st.ScheduleFireCount(ctx, r.ID)
		if err != nil {
			return View{}, err
		}
		v.Running, v.Queued = n[store.FireRunning], n[store.FireQueued]
		skips, err := s.st.ScheduleFireList(ctx, store.ScheduleFireListParams{ScheduleID: r.ID, State: store.FireSkipped,
			Newest: true, Limit: 1})
		if err != nil {
			return View{}, err
		}
		if len(skips) == 1 {
			v.LastSkip = &skips[0]
		}
	}
	return v, nil
}

// lastJobStatus is the status of the job of r's last fire: the job's own while it exists,
// then the one its fire row recorded.
func (s *Service) lastJobStatus(ctx context.Context, r store.Schedule) (string, error) {
	hs, err := s.st.JobHolders(ctx, []string{r.LastJobID})
	switch {
	case err != nil:
		return "", err
	case len(hs) == 1:
		return string(hs[0].Status), nil
	case r.LastFireAt == nil:
		return JobGone, nil
	}
	fr, err := s.st.ScheduleFireGet(ctx, r.ID, *r.LastFireAt)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return JobGone, nil
	case err != nil:
		return "", err
	case fr.JobStatus != "":
		return fr.JobStatus, nil
	}
	return JobGone, nil
}

// adminEvent is the audit row of an admin's change to schedule r.
func adminEvent(typ string, r store.Schedule, actor string, now time.Time) store.AuditEvent {
	details, _ := json.Marshal(map[string]any{"schedule_id": r.ID, "cron": r.Cron, "timezone": r.Timezone, "paused": r.Paused})
	return store.AuditEvent{TS: now, EventType: typ, Actor: actor, Details: details}
}
