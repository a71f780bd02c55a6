package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/schedules"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// Page sizes of GET /schedules.
const (
	ScheduleListLimitDefault = 100
	ScheduleListLimitMax     = 1000
)

// schedulesOf is opts.Schedules, or the schedules service over the options' store and engine
// when the store is a whole store.Store (the process wiring and every test server pass one);
// nil otherwise.
func schedulesOf(opts Options) *schedules.Service {
	if opts.Schedules != nil {
		return opts.Schedules
	}
	st, ok := opts.Store.(store.Store)
	if !ok || opts.Engine == nil || opts.Config == nil {
		return nil
	}
	return schedules.NewService(st, opts.Engine, opts.Config, nil)
}

// scheduleRoutes are the routes of schedules. An admin manages every schedule. An agent token
// reads the schedules whose jobs run as its agent (another agent's is a 404) and changes none:
// a schedule's fires are made by the leader, past the agent's token bucket, so only an admin
// decides that jobs are made that way.
func (s *Server) scheduleRoutes(r *gin.Engine) {
	agents, admins := s.requireRole(RoleAgent, RoleAdmin), s.requireRole(RoleAdmin)
	r.POST("/schedules", admins, s.schedulesEnabled, s.createSchedule)
	r.GET("/schedules", agents, s.schedulesEnabled, s.listSchedules)
	r.GET("/schedules/:id", agents, s.schedulesEnabled, s.getSchedule)
	r.PATCH("/schedules/:id", admins, s.schedulesEnabled, s.updateSchedule)
	// The jobs a deleted schedule made stay.
	r.DELETE("/schedules/:id", admins, s.schedulesEnabled, remove(s, s.scheduleID, s.schedules.Delete))
	// pause: nothing fires until it is resumed; resume: it fires again from now on, the fire
	// times it passed paused not caught up.
	r.POST("/schedules/:id/pause", admins, s.schedulesEnabled, turn(s, s.scheduleID, s.schedules.SetPaused, scheduleToWire, true))
	r.POST("/schedules/:id/resume", admins, s.schedulesEnabled, turn(s, s.scheduleID, s.schedules.SetPaused, scheduleToWire, false))
	r.POST("/schedules/:id/trigger", admins, s.schedulesEnabled, s.triggerSchedule)
}

// schedulesEnabled answers 503 when the server runs without schedules (a server built without
// a store).
func (s *Server) schedulesEnabled(c *gin.Context) {
	if s.schedules == nil {
		s.writeError(c, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "schedules are not enabled on this server"})
		return
	}
	c.Next()
}

// createSchedule handles POST /schedules: 201 with the schedule; 409 when its id is taken.
// Audited schedule.created.
func (s *Server) createSchedule(c *gin.Context) {
	var req wire.ScheduleRequest
	if err := decodeJSON(c, s.cfg.MaxPayloadBytes+submitEnvelopeBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	switch {
	case req.ID == "":
		s.writeError(c, badRequest("id", "is required"))
		return
	case req.Cron == nil:
		s.writeError(c, badRequest("cron", "is required"))
		return
	case req.Job == nil:
		s.writeError(c, badRequest("job", "is required: the job each fire submits"))
		return
	}
	sp := schedules.Spec{ID: req.ID}
	if err := s.applySchedule(c, &sp, req); err != nil {
		s.writeError(c, err)
		return
	}
	v, err := s.schedules.Create(c.Request.Context(), sp, mustIdentity(c).Actor())
	if errors.Is(err, store.ErrConflict) {
		err = &Error{Status: http.StatusConflict, Code: CodeConflict, Field: "id", Message: fmt.Sprintf("schedule %q exists", req.ID)}
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusCreated, scheduleToWire(v))
}

// applySchedule writes the fields req names into sp, the job checked first as a submit's
// body is (errors named job.<field>).
func (s *Server) applySchedule(c *gin.Context, sp *schedules.Spec, req wire.ScheduleRequest) error {
	if req.ID != "" && req.ID != sp.ID {
		return badRequest("id", "cannot be changed (it is %q)", sp.ID)
	}
	if j := req.Job; j != nil {
		body := submitBody{Type: j.Type, Agent: j.Agent, Payload: j.Payload, MaxAttempts: j.MaxAttempts, Resources: j.Resources,
			Priority: j.Priority}
		if _, err := s.submitParams(mustIdentity(c), body); err != nil {
			return underJob(err)
		}
		sp.Job = schedules.JobTemplate{Type: j.Type, Agent: j.Agent, Payload: j.Payload, Priority: j.Priority}
		if j.MaxAttempts != nil {
			sp.Job.MaxAttempts = *j.MaxAttempts
		}
		if r := j.Resources; r != nil {
			sp.Job.Resources = &schedules.TemplateResources{GPUMemoryMB: r.GPUMemoryMB, GPUs: r.GPUs, Exclusive: r.Exclusive}
		}
	}
	set(&sp.Cron, req.Cron)
	set(&sp.Timezone, req.Timezone)
	set(&sp.CatchUp, req.CatchUp)
	set(&sp.CatchUpMax, req.CatchUpMax)
	set(&sp.MaxConcurrent, req.MaxConcurrent)
	set(&sp.OnOverlap, req.OnOverlap)
	set(&sp.RequirePreviousSuccess, req.RequirePreviousSuccess)
	set(&sp.Paused, req.Paused)
	return nil
}

// set writes *v to dst when v is given.
func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// underJob names the field of a job template's error under job (job.payload).
func underJob(err error) error {
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.Field != "" {
		e := *apiErr
		e.Field = "job." + e.Field
		return &e
	}
	return err
}

// listSchedules handles GET /schedules?agent=&after=&limit=: a page by id. An agent token sees
// its own agent's schedules only.
func (s *Server) listSchedules(c *gin.Context) {
	who := mustIdentity(c)
	agent := c.Query("agent")
	if who.Role == RoleAgent {
		agent = who.Agent
	}
	limit := ScheduleListLimitDefault
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ScheduleListLimitMax {
			s.writeError(c, badRequest("limit", "must be in 1..%d", ScheduleListLimitMax))
			return
		}
		limit = n
	}
	vs, err := s.schedules.List(c.Request.Context(), agent, c.Query("after"), limit)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.ScheduleList{Schedules: make([]wire.Schedule, 0, len(vs))}
	for _, v := range vs {
		out.Schedules = append(out.Schedules, scheduleToWire(v))
	}
	if len(vs) == limit {
		out.NextAfter = vs[len(vs)-1].ID
	}
	c.JSON(http.StatusOK, out)
}

// getSchedule handles GET /schedules/{id}: the schedule with its next runs, last fire and
// counts. Another agent's schedule is a 404 to an agent token.
func (s *Server) getSchedule(c *gin.Context) {
	id, ok := s.scheduleID(c)
	if !ok {
		return
	}
	v, err := s.schedules.Get(c.Request.Context(), id)
	if err == nil {
		if who := mustIdentity(c); who.Role == RoleAgent && v.Agent != who.Agent {
			err = fmt.Errorf("schedule %s: %w", id, store.ErrNotFound)
		}
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, scheduleToWire(v))
}

// updateSchedule handles PATCH /schedules/{id}: the fields given replace the schedule's.
// Audited schedule.updated (.paused, .resumed when only that changed).
func (s *Server) updateSchedule(c *gin.Context) {
	id, ok := s.scheduleID(c)
	if !ok {
		return
	}
	var req wire.ScheduleRequest
	if err := decodeJSON(c, s.cfg.MaxPayloadBytes+submitEnvelopeBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	v, err := s.schedules.Update(c.Request.Context(), id, mustIdentity(c).Actor(), func(sp *schedules.Spec) error {
		return s.applySchedule(c, sp, req)
	})
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, scheduleToWire(v))
}

// triggerSchedule handles POST /schedules/{id}/trigger: one fire now, whatever the rules and
// even paused; 201 with the fire and its job. A template the engine refuses now is a 400 (or
// 422) naming job.<field>.
func (s *Server) triggerSchedule(c *gin.Context) {
	id, ok := s.scheduleID(c)
	if !ok {
		return
	}
	f, err := s.schedules.Trigger(c.Request.Context(), id, mustIdentity(c).Actor())
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusCreated, wire.ScheduleFire{ScheduleID: id, FireTime: f.FireTime.Format(time.RFC3339Nano),
		JobID: f.JobID, JobStatus: string(store.JobPending)})
}

// scheduleID is the path's schedule id, or false after a 400.
func (s *Server) scheduleID(c *gin.Context) (string, bool) {
	id := c.Param("id")
	if !schedules.IDPattern.MatchString(id) {
		s.writeError(c, badID("id", schedules.IDPattern))
		return "", false
	}
	return id, true
}

// zoneOf is the zone of a stored schedule (UTC when it no longer loads).
func zoneOf(name string) *time.Location {
	loc, err := schedules.ParseTimezone(name)
	if err != nil {
		return time.UTC
	}
	return loc
}

func scheduleToWire(v schedules.View) wire.Schedule {
	loc := zoneOf(v.Timezone)
	tpl := v.Spec.Job
	out := wire.Schedule{ID: v.ID, Cron: v.Cron, Timezone: v.Timezone,
		Job:     wire.ScheduleJob{Type: tpl.Type, Agent: tpl.Agent, Payload: tpl.Payload, Priority: tpl.Priority},
		CatchUp: v.CatchUp, CatchUpMax: v.CatchUpMax, MaxConcurrent: v.MaxConcurrent, OnOverlap: v.OnOverlap,
		RequirePreviousSuccess: v.RequirePreviousSuccess, Paused: v.Paused, NextRuns: make([]string, 0, len(v.NextRuns)),
		Running: v.Running, Queued: v.Queued, CreatedBy: v.CreatedBy, CreatedAt: v.CreatedAt.UTC(), UpdatedAt: v.UpdatedAt.UTC()}
	if tpl.MaxAttempts > 0 {
		n := tpl.MaxAttempts
		out.Job.MaxAttempts = &n
	}
	if r := tpl.Resources; r != nil {
		out.Job.Resources = &wire.Resources{GPUMemoryMB: r.GPUMemoryMB, GPUs: r.GPUs, Exclusive: r.Exclusive}
	}
	for _, t := range v.NextRuns {
		out.NextRuns = append(out.NextRuns, t.In(loc).Format(time.RFC3339))
	}
	if v.LastFireAt != nil {
		out.LastFire = &wire.ScheduleFire{ScheduleID: v.ID, FireTime: v.LastFireAt.In(loc).Format(time.RFC3339Nano),
			JobID: v.LastJobID, JobStatus: v.LastJobStatus}
	}
	if k := v.LastSkip; k != nil {
		out.LastSkip = &wire.ScheduleSkip{FireTime: k.FireTime.In(loc).Format(time.RFC3339Nano), Reason: k.Reason}
	}
	return out
}
