package store

import (
	"context"
	"encoding/json"
	"time"
)

// Schedule is one row of schedules: a job template created on a cron schedule by the leader's
// firer (package schedules holds the rules; the store keeps the row).
type Schedule struct {
	ID string
	// Agent is the agent the schedule's jobs run as (the template's), kept apart for listing.
	Agent    string
	Cron     string
	Timezone string
	// Job is the job template, a JSON object (schedules.JobTemplate).
	Job json.RawMessage
	// CatchUp is skip, once or all; CatchUpMax caps all.
	CatchUp    string
	CatchUpMax int
	// MaxConcurrent is the most unfinished jobs at once (0: no limit); OnOverlap (skip or
	// queue) says what a fire does past it.
	MaxConcurrent int
	OnOverlap     string
	// RequirePreviousSuccess skips a fire whose previous job did not end done.
	RequirePreviousSuccess bool
	Paused                 bool
	// NextFireAt is the firer's cursor: the earliest fire time not handled yet (nil: none,
	// a schedule that never fires again).
	NextFireAt *time.Time
	// LastFireAt and LastJobID are the latest fire that created a job (nil and "" before the
	// first).
	LastFireAt *time.Time
	LastJobID  string
	CreatedBy  string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// FireState is the state of a schedule fire.
type FireState string

// Fire states.
const (
	// FireQueued: the fire waits for one of its schedule's jobs to end (on_overlap queue); its
	// job is not created yet.
	FireQueued FireState = "queued"
	// FireRunning: its job was created and is not known to have ended.
	FireRunning FireState = "running"
	// FireEnded: its job ended (JobStatus says how) or was deleted ("gone").
	FireEnded FireState = "ended"
	// FireSkipped: it created no job (Reason says why).
	FireSkipped FireState = "skipped"
)

// ScheduleFire is one row of schedule_fires: a fire time of a schedule, handled once.
type ScheduleFire struct {
	ScheduleID string
	FireTime   time.Time
	State      FireState
	// JobID is the fire's job (for a queued fire, the id its job will have).
	JobID string
	// JobStatus is the job's terminal status once seen ended, "gone" when it was deleted
	// first; "" until then.
	JobStatus string
	// Reason says why it fired or was skipped.
	Reason    string
	CreatedAt time.Time
	// FiredAt is when its job was created (nil while queued, or when skipped).
	FiredAt *time.Time
}

// ScheduleListParams pages GET /schedules, by id.
type ScheduleListParams struct {
	Agent string // empty: any
	After string // the last id of the previous page
	Limit int
}

// ScheduleFireListParams selects fires, oldest first (Newest: newest first).
type ScheduleFireListParams struct {
	ScheduleID string    // empty: every schedule's
	State      FireState // empty: any
	Newest     bool
	// After, oldest first only: the fires after this one in (fire time, schedule) order, so
	// that a caller that reads a page a pass goes round all of them.
	After *ScheduleFire
	Limit int
}

// ScheduleExecutor is the operations on schedules and schedule_fires.
type ScheduleExecutor interface {
	// ScheduleInsert inserts a new schedule; ErrConflict when its id is taken.
	ScheduleInsert(ctx context.Context, s Schedule) error
	// ScheduleGet returns one schedule or ErrNotFound; forUpdate locks its row for the rest of
	// the transaction (only meaningful in a Tx): every write of a schedule's fires holds it.
	ScheduleGet(ctx context.Context, id string, forUpdate bool) (Schedule, error)
	// ScheduleList returns a page of schedules, by id.
	ScheduleList(ctx context.Context, p ScheduleListParams) ([]Schedule, error)
	// ScheduleUpdate writes every column of s but its id, created_by and created_at;
	// ErrNotFound when it does not exist.
	ScheduleUpdate(ctx context.Context, s Schedule) error
	// ScheduleDelete deletes a schedule and its fires; ErrNotFound when it does not exist.
	ScheduleDelete(ctx context.Context, id string) error
	// ScheduleListDue returns the ids of the schedules that are not paused and whose
	// next_fire_at is at or before now, earliest first.
	ScheduleListDue(ctx context.Context, now time.Time, limit int) ([]string, error)
	// ScheduleNextFire returns the earliest next_fire_at of the schedules that are not
	// paused; ok is false when none has one.
	ScheduleNextFire(ctx context.Context) (at time.Time, ok bool, err error)
	// ScheduleFireInsert inserts a fire; ErrConflict when its (schedule, fire time) exists.
	ScheduleFireInsert(ctx context.Context, f ScheduleFire) error
	// ScheduleFireGet returns one fire or ErrNotFound.
	ScheduleFireGet(ctx context.Context, scheduleID string, fireTime time.Time) (ScheduleFire, error)
	// ScheduleFireUpdate writes the state, job, job status, reason and fired_at of an existing
	// fire; ErrNotFound when it does not exist.
	ScheduleFireUpdate(ctx context.Context, f ScheduleFire) error
	// ScheduleFireList returns fires, by fire time.
	ScheduleFireList(ctx context.Context, p ScheduleFireListParams) ([]ScheduleFire, error)
	// ScheduleFireCount counts the fires of a schedule in each state (a state without any is
	// absent).
	ScheduleFireCount(ctx context.Context, scheduleID string) (map[FireState]int, error)
	// ScheduleFireDeleteBefore deletes up to limit ended and skipped fires whose fire time is
	// before before, except the last fire of each schedule (its last_fire_at), and returns how
	// many it deleted.
	ScheduleFireDeleteBefore(ctx context.Context, before time.Time, limit int) (int, error)
}
