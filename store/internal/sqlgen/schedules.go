package sqlgen

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of schedules and their fires that both dialects share
// (store.ScheduleExecutor).

const (
	scheduleColumns = `schedule_id, agent, cron, timezone, job, catch_up, catch_up_max, max_concurrent,
	on_overlap, require_previous_success, paused, next_fire_at, last_fire_at, last_job_id, created_by, created_at, updated_at`
	fireColumns = "schedule_id, fire_time, state, job_id, job_status, reason, created_at, fired_at"
	// scheduleActorMax is the capacity of schedules.created_by.
	scheduleActorMax = 160
)

// ScheduleInsert inserts a new schedule; store.ErrConflict when its id is taken.
func (e Executor) ScheduleInsert(ctx context.Context, s store.Schedule) error {
	_, err := e.w.ExecContext(ctx, "INSERT INTO schedules ("+scheduleColumns+") VALUES ("+Placeholders(17)+")",
		s.ID, s.Agent, s.Cron, s.Timezone, string(s.Job), s.CatchUp, s.CatchUpMax, s.MaxConcurrent, s.OnOverlap,
		s.RequirePreviousSuccess, s.Paused, e.d.nullTimePtr(s.NextFireAt), e.d.nullTimePtr(s.LastFireAt), s.LastJobID,
		TruncateUTF8(s.CreatedBy, scheduleActorMax), e.d.Time(s.CreatedAt), e.d.Time(s.UpdatedAt))
	return wrapErr("insert schedule "+s.ID, e.d.MapErr(err))
}

// ScheduleGet returns one schedule or store.ErrNotFound, locked when forUpdate.
func (e Executor) ScheduleGet(ctx context.Context, id string, forUpdate bool) (store.Schedule, error) {
	return getOne(ctx, e, "get schedule "+id, scheduleColumns+" FROM schedules WHERE schedule_id", id, forUpdate, e.d.scanSchedule)
}

// ScheduleList returns a page of schedules by id (of one agent when p.Agent is set).
func (e Executor) ScheduleList(ctx context.Context, p store.ScheduleListParams) ([]store.Schedule, error) {
	f := filter{where: []string{"schedule_id > ?"}, args: []any{p.After}}
	f.addIf("agent = ?", p.Agent)
	out, err := query(ctx, e.d, e.r, e.d.scanSchedule, "SELECT "+scheduleColumns+" FROM schedules"+f.sql()+
		" ORDER BY schedule_id LIMIT ?", append(f.args, ClampLimit(p.Limit, ListLimitDefault, ListLimitMax))...)
	return out, wrapErr("list schedules", err)
}

// ScheduleUpdate writes the mutable columns of s; store.ErrNotFound when it does not exist.
func (e Executor) ScheduleUpdate(ctx context.Context, s store.Schedule) error {
	return e.execFound(ctx, "update schedule "+s.ID, `UPDATE schedules SET agent = ?, cron = ?, timezone = ?, job = ?,
		catch_up = ?, catch_up_max = ?, max_concurrent = ?, on_overlap = ?, require_previous_success = ?, paused = ?,
		next_fire_at = ?, last_fire_at = ?, last_job_id = ?, updated_at = ? WHERE schedule_id = ?`,
		s.Agent, s.Cron, s.Timezone, string(s.Job), s.CatchUp, s.CatchUpMax, s.MaxConcurrent, s.OnOverlap,
		s.RequirePreviousSuccess, s.Paused, e.d.nullTimePtr(s.NextFireAt), e.d.nullTimePtr(s.LastFireAt), s.LastJobID,
		e.d.Time(s.UpdatedAt), s.ID)
}

// ScheduleDelete deletes a schedule and its fires (fires first, the order of every writer of
// both: the firer locks the schedule row, then writes its fires).
func (e Executor) ScheduleDelete(ctx context.Context, id string) error {
	what := "delete schedule " + id
	if _, err := e.d.ExecCount(ctx, e.w, what, "DELETE FROM schedule_fires WHERE schedule_id = ?", id); err != nil {
		return err
	}
	return e.execFound(ctx, what, "DELETE FROM schedules WHERE schedule_id = ?", id)
}

// ScheduleListDue returns the ids of the unpaused schedules due at now, earliest first.
func (e Executor) ScheduleListDue(ctx context.Context, now time.Time, limit int) ([]string, error) {
	ids, err := QueryColumn[string](ctx, e.d, e.r, "SELECT schedule_id FROM schedules WHERE paused = 0 AND next_fire_at <= ?"+
		" ORDER BY next_fire_at, schedule_id LIMIT ?", e.d.Time(now), ClampLimit(limit, ListLimitDefault, ListLimitMax))
	return ids, wrapErr("list due schedules", err)
}

// ScheduleNextFire returns the earliest next_fire_at of the unpaused schedules.
func (e Executor) ScheduleNextFire(ctx context.Context) (time.Time, bool, error) {
	var at time.Time
	err := e.r.QueryRowContext(ctx, "SELECT next_fire_at FROM schedules WHERE paused = 0 AND next_fire_at IS NOT NULL"+
		" ORDER BY next_fire_at LIMIT 1").Scan(e.d.at(&at))
	if err = e.d.MapErr(err); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return time.Time{}, false, nil
		}
		return time.Time{}, false, fmt.Errorf("read the next fire time: %w", err)
	}
	return at, true, nil
}

// ScheduleFireInsert inserts a fire; store.ErrConflict when its (schedule, fire time) exists.
func (e Executor) ScheduleFireInsert(ctx context.Context, f store.ScheduleFire) error {
	_, err := e.w.ExecContext(ctx, "INSERT INTO schedule_fires ("+fireColumns+") VALUES ("+Placeholders(8)+")",
		f.ScheduleID, e.d.Time(f.FireTime), string(f.State), f.JobID, f.JobStatus, f.Reason, e.d.Time(f.CreatedAt),
		e.d.nullTimePtr(f.FiredAt))
	return wrapErr(fmt.Sprintf("insert fire %s of schedule %s", Micro(f.FireTime).Format(time.RFC3339Nano), f.ScheduleID),
		e.d.MapErr(err))
}

// ScheduleFireGet returns one fire or store.ErrNotFound.
func (e Executor) ScheduleFireGet(ctx context.Context, scheduleID string, fireTime time.Time) (store.ScheduleFire, error) {
	f, err := e.d.scanFire(e.r.QueryRowContext(ctx, "SELECT "+fireColumns+" FROM schedule_fires WHERE schedule_id = ? AND fire_time = ?",
		scheduleID, e.d.Time(fireTime)))
	if err != nil {
		return store.ScheduleFire{}, fmt.Errorf("get fire of schedule %s: %w", scheduleID, e.d.MapErr(err))
	}
	return f, nil
}

// ScheduleFireUpdate writes the state, job, job status, reason and fired_at of a fire.
func (e Executor) ScheduleFireUpdate(ctx context.Context, f store.ScheduleFire) error {
	return e.execFound(ctx, "update fire of schedule "+f.ScheduleID, `UPDATE schedule_fires SET state = ?, job_id = ?,
		job_status = ?, reason = ?, fired_at = ? WHERE schedule_id = ? AND fire_time = ?`,
		string(f.State), f.JobID, f.JobStatus, f.Reason, e.d.nullTimePtr(f.FiredAt), f.ScheduleID, e.d.Time(f.FireTime))
}

// ScheduleFireList returns fires by fire time (then schedule).
func (e Executor) ScheduleFireList(ctx context.Context, p store.ScheduleFireListParams) ([]store.ScheduleFire, error) {
	var f filter
	f.addIf("schedule_id = ?", p.ScheduleID)
	f.addIf("state = ?", string(p.State))
	if a := p.After; a != nil && !p.Newest {
		at := e.d.Time(a.FireTime)
		f.add("(fire_time > ? OR (fire_time = ? AND schedule_id > ?))", at, at, a.ScheduleID)
	}
	order := " ORDER BY fire_time, schedule_id"
	if p.Newest {
		order = " ORDER BY fire_time DESC, schedule_id DESC"
	}
	out, err := query(ctx, e.d, e.r, e.d.scanFire, "SELECT "+fireColumns+" FROM schedule_fires"+f.sql()+order+" LIMIT ?",
		append(f.args, ClampLimit(p.Limit, ListLimitDefault, ListLimitMax))...)
	return out, wrapErr("list schedule fires", err)
}

// ScheduleFireCount counts a schedule's fires by state.
func (e Executor) ScheduleFireCount(ctx context.Context, scheduleID string) (map[store.FireState]int, error) {
	type count struct {
		state store.FireState
		n     int
	}
	rows, err := query(ctx, e.d, e.r, func(row Scanner) (count, error) {
		var c count
		err := row.Scan(&c.state, &c.n)
		return c, err
	}, "SELECT state, COUNT(*) FROM schedule_fires WHERE schedule_id = ? GROUP BY state", scheduleID)
	if err != nil {
		return nil, fmt.Errorf("count fires of schedule %s: %w", scheduleID, err)
	}
	out := make(map[store.FireState]int, len(rows))
	for _, c := range rows {
		out[c.state] = c.n
	}
	return out, nil
}

// ScheduleFireDeleteBefore deletes old ended and skipped fires, keeping each schedule's last.
// The rows are picked by SQLite's rowid (Dialect.DeleteFirst names the key only there;
// MariaDB's DELETE takes the ORDER BY and LIMIT itself).
func (e Executor) ScheduleFireDeleteBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	return e.d.ExecCount(ctx, e.w, "delete old schedule fires", e.d.DeleteFirst("schedule_fires", "rowid",
		`WHERE state IN (?, ?) AND fire_time < ? AND NOT EXISTS (SELECT 1 FROM schedules s
		WHERE s.schedule_id = schedule_fires.schedule_id AND s.last_fire_at = schedule_fires.fire_time)
		ORDER BY fire_time LIMIT ?`),
		string(store.FireEnded), string(store.FireSkipped), e.d.Time(before), MaintenanceLimit(limit))
}

// scanSchedule reads a row of scheduleColumns.
func (enc Encoding) scanSchedule(row Scanner) (store.Schedule, error) {
	var (
		s   store.Schedule
		job string
	)
	err := row.Scan(&s.ID, &s.Agent, &s.Cron, &s.Timezone, &job, &s.CatchUp, &s.CatchUpMax, &s.MaxConcurrent, &s.OnOverlap,
		&s.RequirePreviousSuccess, &s.Paused, enc.atPtr(&s.NextFireAt), enc.atPtr(&s.LastFireAt), &s.LastJobID, &s.CreatedBy,
		enc.at(&s.CreatedAt), enc.at(&s.UpdatedAt))
	s.Job = []byte(job)
	return s, err
}

// scanFire reads a row of fireColumns.
func (enc Encoding) scanFire(row Scanner) (store.ScheduleFire, error) {
	var f store.ScheduleFire
	err := row.Scan(&f.ScheduleID, enc.at(&f.FireTime), &f.State, &f.JobID, &f.JobStatus, &f.Reason, enc.at(&f.CreatedAt),
		enc.atPtr(&f.FiredAt))
	return f, err
}
