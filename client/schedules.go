package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpuorch/orchestrator/wire"
)

// The wire types of schedules.
type (
	// Schedule is wire.Schedule.
	Schedule = wire.Schedule
	// ScheduleJob is wire.ScheduleJob.
	ScheduleJob = wire.ScheduleJob
	// ScheduleRequest is wire.ScheduleRequest.
	ScheduleRequest = wire.ScheduleRequest
	// ScheduleFire is wire.ScheduleFire.
	ScheduleFire = wire.ScheduleFire
	// ScheduleSkip is wire.ScheduleSkip.
	ScheduleSkip = wire.ScheduleSkip
	// ScheduleList is wire.ScheduleList.
	ScheduleList = wire.ScheduleList
)

// ScheduleListParams filter and page ListSchedules.
type ScheduleListParams struct {
	// Agent keeps one agent's schedules (an admin's filter; an agent token sees its own only).
	Agent string
	// After is the NextAfter of the previous page.
	After string
	// Limit is the page size (0: the server's default).
	Limit int
}

// ListSchedules returns a page of schedules by id (GET /schedules).
func (c *Client) ListSchedules(ctx context.Context, p ScheduleListParams) (ScheduleList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"agent": p.Agent, "after": p.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	return call[ScheduleList](ctx, c, http.MethodGet, "/schedules", q, nil, "list schedules")
}

// GetSchedule returns one schedule with its next runs and last fire (GET /schedules/{id}).
func (c *Client) GetSchedule(ctx context.Context, id string) (Schedule, error) {
	return call[Schedule](ctx, c, http.MethodGet, schedulePath(id, ""), nil, nil, "get schedule "+id)
}

// CreateSchedule creates a schedule (POST /schedules; ID, Cron and Job required).
func (c *Client) CreateSchedule(ctx context.Context, req ScheduleRequest) (Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPost, "/schedules", nil, req, "create schedule "+req.ID)
}

// UpdateSchedule replaces the fields req gives (PATCH /schedules/{id}).
func (c *Client) UpdateSchedule(ctx context.Context, id string, req ScheduleRequest) (Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPatch, schedulePath(id, ""), nil, req, "update schedule "+id)
}

// DeleteSchedule deletes a schedule; the jobs it made stay (DELETE /schedules/{id}).
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	return wrap(c.do(ctx, http.MethodDelete, schedulePath(id, ""), nil, nil, nil), "delete schedule "+id)
}

// PauseSchedule stops the schedule's fires until it is resumed (POST /schedules/{id}/pause).
func (c *Client) PauseSchedule(ctx context.Context, id string) (Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPost, schedulePath(id, "/pause"), nil, nil, "pause schedule "+id)
}

// ResumeSchedule fires the schedule again from now on (POST /schedules/{id}/resume).
func (c *Client) ResumeSchedule(ctx context.Context, id string) (Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPost, schedulePath(id, "/resume"), nil, nil, "resume schedule "+id)
}

// TriggerSchedule fires the schedule now, whatever its rules (POST /schedules/{id}/trigger).
func (c *Client) TriggerSchedule(ctx context.Context, id string) (ScheduleFire, error) {
	return call[ScheduleFire](ctx, c, http.MethodPost, schedulePath(id, "/trigger"), nil, nil, "trigger schedule "+id)
}

func schedulePath(id, action string) string { return "/schedules/" + url.PathEscape(id) + action }
