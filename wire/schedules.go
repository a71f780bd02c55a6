package wire

import (
	"encoding/json"
	"time"
)

// Schedule options (ScheduleRequest.CatchUp and .OnOverlap).
const (
	CatchUpSkip  = "skip"
	CatchUpOnce  = "once"
	CatchUpAll   = "all"
	OverlapSkip  = "skip"
	OverlapQueue = "queue"
)

// ScheduleJob is the job a schedule's fires create: the fields of a submit (SubmitRequest) a
// schedule keeps, checked as a submit's are. A field left out takes its type's default when
// the job is made.
type ScheduleJob struct {
	Type    string          `json:"type"`
	Agent   string          `json:"agent"`
	Payload json.RawMessage `json:"payload"`
	// Resources override what the type asks of the GPUs.
	Resources *Resources `json:"resources,omitempty"`
	// Priority overrides the type's, 0..9.
	Priority *int `json:"priority,omitempty"`
	// MaxAttempts overrides the type's attempt budget, 1..100.
	MaxAttempts *int `json:"max_attempts,omitempty"`
}

// ScheduleRequest is the body of POST /schedules (id, cron and job required; the others take
// their defaults) and of PATCH /schedules/{id} (every field optional: those given replace the
// schedule's, and job replaces the whole template; id, when given, must be the schedule's).
type ScheduleRequest struct {
	ID string `json:"id,omitempty"`
	// Cron is 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first,
	// "@every <duration>" (whole seconds), @hourly, @daily, @weekly, @monthly or @yearly.
	Cron *string `json:"cron,omitempty"`
	// Timezone is the IANA zone the cron fields are read in (default UTC).
	Timezone *string      `json:"timezone,omitempty"`
	Job      *ScheduleJob `json:"job,omitempty"`
	// CatchUp says what becomes of fire times missed by more than schedules.misfire_grace:
	// skip, once (default: one job for them all) or all (up to CatchUpMax, the latest).
	CatchUp    *string `json:"catch_up,omitempty"`
	CatchUpMax *int    `json:"catch_up_max,omitempty"`
	// MaxConcurrent is the most unfinished jobs of the schedule at once (0, the default: no
	// limit); OnOverlap is what a fire does past it: skip (default) or queue.
	MaxConcurrent *int    `json:"max_concurrent,omitempty"`
	OnOverlap     *string `json:"on_overlap,omitempty"`
	// RequirePreviousSuccess skips a fire whose previous job did not end done; while that job
	// is unfinished the fire waits as an overlap does (queued, or skipped).
	RequirePreviousSuccess *bool `json:"require_previous_success,omitempty"`
	Paused                 *bool `json:"paused,omitempty"`
}

// Schedule is a schedule as GET /schedules/{id} shows it.
type Schedule struct {
	ID                     string      `json:"id"`
	Cron                   string      `json:"cron"`
	Timezone               string      `json:"timezone"`
	Job                    ScheduleJob `json:"job"`
	CatchUp                string      `json:"catch_up"`
	CatchUpMax             int         `json:"catch_up_max"`
	MaxConcurrent          int         `json:"max_concurrent"`
	OnOverlap              string      `json:"on_overlap"`
	RequirePreviousSuccess bool        `json:"require_previous_success"`
	Paused                 bool        `json:"paused"`
	// NextRuns are the next 5 fire times, RFC 3339 in the schedule's timezone (none while
	// paused).
	NextRuns []string `json:"next_runs"`
	// LastFire is the latest fire that made a job (absent before the first).
	LastFire *ScheduleFire `json:"last_fire,omitempty"`
	// LastSkip is the latest fire time skipped on its own (overlap, queue_full,
	// previous_running, previous_failed, invalid_job; GET /schedules/{id} only). Missed fire
	// times that catch_up dropped are counted in the audit trail (schedule.skipped) instead.
	LastSkip *ScheduleSkip `json:"last_skip,omitempty"`
	// Running counts the fires whose jobs are not known to have ended yet, Queued the fires
	// waiting for one of them to end (GET /schedules/{id} only).
	Running   int       `json:"running"`
	Queued    int       `json:"queued"`
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ScheduleFire is one fire of a schedule that made a job.
type ScheduleFire struct {
	ScheduleID string `json:"schedule_id"`
	// FireTime is RFC 3339 in the schedule's timezone.
	FireTime string `json:"fire_time"`
	JobID    string `json:"job_id"`
	// JobStatus is the job's status ("gone" once it was deleted).
	JobStatus string `json:"job_status"`
}

// ScheduleSkip is a fire time of a schedule that made no job, and why.
type ScheduleSkip struct {
	// FireTime is RFC 3339 in the schedule's timezone.
	FireTime string `json:"fire_time"`
	Reason   string `json:"reason"`
}

// ScheduleList is the answer of GET /schedules: a page by id; NextAfter, when set, is the
// after= of the next page.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
	NextAfter string     `json:"next_after,omitempty"`
}
