package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// TestSchedulesAPI, on MariaDB and on SQLite: an admin creates, reads, changes, pauses,
// triggers and deletes schedules; agents read their own only; a bad field is a 400 naming it.
func TestSchedulesAPI(t *testing.T) {
	t.Parallel()
	for name, setup := range map[string]func(testing.TB) *bundle{"MariaDB": setup, "SQLite": setupSQLiteAPI} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			t.Run("CreateAndGet", func(t *testing.T) { testScheduleCreate(t, b) })
			t.Run("Validation", func(t *testing.T) { testScheduleValidation(t, b) })
			t.Run("Roles", func(t *testing.T) { testScheduleRoles(t, b) })
			t.Run("ChangePauseTriggerDelete", func(t *testing.T) { testScheduleLifecycle(t, b) })
		})
	}
}

// scheduleBody is a valid POST /schedules body for agent, as a map a test may change.
func scheduleBody(id, agent string) map[string]any {
	return map[string]any{"id": id, "cron": "0 9 * * *", "timezone": "Europe/Berlin",
		"job": map[string]any{"type": "noop", "agent": agent, "payload": map[string]any{"n": 1}}}
}

func testScheduleCreate(t *testing.T, b *bundle) {
	rec := b.request(t, http.MethodPost, "/schedules", "admin", scheduleBody("daily-alice", "alice"))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	got := decode[wire.Schedule](t, rec)
	require.Equal(t, "daily-alice", got.ID)
	require.Equal(t, "Europe/Berlin", got.Timezone)
	require.Equal(t, wire.CatchUpOnce, got.CatchUp, "the default")
	require.Equal(t, 100, got.CatchUpMax)
	require.Equal(t, wire.OverlapSkip, got.OnOverlap)
	require.Zero(t, got.MaxConcurrent)
	require.False(t, got.Paused)
	require.Nil(t, got.LastFire)
	require.JSONEq(t, `{"n":1}`, string(got.Job.Payload))
	require.True(t, strings.HasPrefix(got.CreatedBy, "admin:"))

	rec = b.request(t, http.MethodGet, "/schedules/daily-alice", "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	got = decode[wire.Schedule](t, rec)
	require.Len(t, got.NextRuns, 5)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	prev := time.Now()
	for _, r := range got.NextRuns {
		at, err := time.Parse(time.RFC3339, r)
		require.NoError(t, err, r)
		require.Equal(t, "09:00:00", at.In(berlin).Format(time.TimeOnly), "09:00 in Berlin")
		_, offset := at.In(berlin).Zone()
		require.True(t, strings.HasSuffix(r, time.Unix(0, 0).In(time.FixedZone("", offset)).Format("-07:00")),
			"%s is written in the schedule's zone", r)
		require.True(t, at.After(prev))
		prev = at
	}

	rec = b.request(t, http.MethodPost, "/schedules", "admin", scheduleBody("daily-alice", "alice"))
	requireError(t, rec, http.StatusConflict, CodeConflict, "id")
}

func testScheduleValidation(t *testing.T, b *bundle) {
	change := func(f func(m map[string]any)) map[string]any {
		m := scheduleBody("v", "alice")
		f(m)
		return m
	}
	job := func(m map[string]any) map[string]any { return m["job"].(map[string]any) }
	for _, tc := range []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"NoID", change(func(m map[string]any) { delete(m, "id") }), 400, "id"},
		{"BadID", change(func(m map[string]any) { m["id"] = "a/b" }), 400, "id"},
		{"LongID", change(func(m map[string]any) { m["id"] = strings.Repeat("x", 97) }), 400, "id"},
		{"NoCron", change(func(m map[string]any) { delete(m, "cron") }), 400, "cron"},
		{"BadCron", change(func(m map[string]any) { m["cron"] = "0 25 * * *" }), 400, "cron"},
		{"SubSecondEvery", change(func(m map[string]any) { m["cron"] = "@every 250ms" }), 400, "cron"},
		{"NeverFires", change(func(m map[string]any) { m["cron"] = "0 0 30 2 *" }), 400, "cron"},
		{"BadZone", change(func(m map[string]any) { m["timezone"] = "Europe/Atlantis" }), 400, "timezone"},
		{"CronTypedWrong", change(func(m map[string]any) { m["cron"] = 5 }), 400, "cron"},
		{"NoJob", change(func(m map[string]any) { delete(m, "job") }), 400, "job"},
		{"NoPayload", change(func(m map[string]any) { delete(job(m), "payload") }), 400, "job.payload"},
		{"PayloadTooLarge", change(func(m map[string]any) { job(m)["payload"] = strings.Repeat("x", testMaxPayload) }), 400, "job.payload"},
		{"UnknownType", change(func(m map[string]any) { job(m)["type"] = "rm_rf" }), 400, "job.type"},
		{"NoAgent", change(func(m map[string]any) { delete(job(m), "agent") }), 400, "job.agent"},
		{"BadMaxAttempts", change(func(m map[string]any) { job(m)["max_attempts"] = 0 }), 400, "job.max_attempts"},
		{"BadPriority", change(func(m map[string]any) { job(m)["priority"] = 10 }), 400, "job.priority"},
		{"BadGPUs", change(func(m map[string]any) {
			job(m)["resources"] = map[string]any{"gpu_memory_mb": 1000, "gpus": 9}
		}), 400, "job.resources.gpus"},
		{"UnknownJobField", change(func(m map[string]any) { job(m)["timeout"] = 30 }), 400, "job.timeout"},
		{"UnknownField", change(func(m map[string]any) { m["every"] = "1m" }), 400, "every"},
		{"BadCatchUp", change(func(m map[string]any) { m["catch_up"] = "sometimes" }), 400, "catch_up"},
		{"BadCatchUpMax", change(func(m map[string]any) { m["catch_up_max"] = 10001 }), 400, "catch_up_max"},
		{"BadMaxConcurrent", change(func(m map[string]any) { m["max_concurrent"] = -1 }), 400, "max_concurrent"},
		{"BadOverlap", change(func(m map[string]any) { m["on_overlap"] = "wait" }), 400, "on_overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := b.request(t, http.MethodPost, "/schedules", "admin", tc.body)
			requireError(t, rec, tc.status, CodeInvalidRequest, tc.field)
		})
	}
	rec := b.request(t, http.MethodGet, "/schedules/v", "admin", nil)
	requireError(t, rec, http.StatusNotFound, CodeNotFound, "")
}

func testScheduleRoles(t *testing.T, b *bundle) {
	for _, who := range []string{"alice", "bob"} {
		rec := b.request(t, http.MethodPost, "/schedules", "admin", scheduleBody("roles-"+who, who))
		require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	}
	// An agent reads its own agent's schedules only.
	rec := b.request(t, http.MethodGet, "/schedules?agent=bob", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	for _, s := range decode[wire.ScheduleList](t, rec).Schedules {
		require.Equal(t, "alice", s.Job.Agent)
	}
	require.Equal(t, http.StatusOK, b.request(t, http.MethodGet, "/schedules/roles-alice", "alice", nil).Code)
	requireError(t, b.request(t, http.MethodGet, "/schedules/roles-bob", "alice", nil), http.StatusNotFound, CodeNotFound, "")
	rec = b.request(t, http.MethodGet, "/schedules?agent=bob", "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	list := decode[wire.ScheduleList](t, rec).Schedules
	require.NotEmpty(t, list)
	for _, s := range list {
		require.Equal(t, "bob", s.Job.Agent)
	}

	// Only an admin changes schedules: an agent cannot even for its own agent.
	for _, call := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/schedules", scheduleBody("mine", "alice")},
		{http.MethodPatch, "/schedules/roles-alice", map[string]any{"paused": true}},
		{http.MethodDelete, "/schedules/roles-alice", nil},
		{http.MethodPost, "/schedules/roles-alice/pause", nil},
		{http.MethodPost, "/schedules/roles-alice/resume", nil},
		{http.MethodPost, "/schedules/roles-alice/trigger", nil},
	} {
		requireError(t, b.request(t, call.method, call.path, "alice", call.body), http.StatusForbidden, CodeForbidden, "")
		requireError(t, b.request(t, call.method, call.path, "worker", call.body), http.StatusForbidden, CodeForbidden, "")
		requireError(t, b.request(t, call.method, call.path, "", call.body), http.StatusUnauthorized, CodeUnauthorized, "")
	}
	requireError(t, b.request(t, http.MethodGet, "/schedules", "worker", nil), http.StatusForbidden, CodeForbidden, "")
}

func testScheduleLifecycle(t *testing.T, b *bundle) {
	ctx := context.Background()
	rec := b.request(t, http.MethodPost, "/schedules", "admin", scheduleBody("life", "alice"))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())

	// PATCH replaces the fields given.
	rec = b.request(t, http.MethodPatch, "/schedules/life", "admin", map[string]any{"cron": "@every 1h", "timezone": "UTC",
		"max_concurrent": 2, "on_overlap": "queue", "require_previous_success": true})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	got := decode[wire.Schedule](t, rec)
	require.Equal(t, "@every 1h", got.Cron)
	require.Equal(t, 2, got.MaxConcurrent)
	require.Equal(t, wire.OverlapQueue, got.OnOverlap)
	require.True(t, got.RequirePreviousSuccess)
	require.Equal(t, "noop", got.Job.Type, "the template stays")
	require.True(t, strings.HasSuffix(got.NextRuns[0], "Z"), "UTC now: %s", got.NextRuns[0])
	requireError(t, b.request(t, http.MethodPatch, "/schedules/life", "admin", map[string]any{"id": "other"}),
		http.StatusBadRequest, CodeInvalidRequest, "id")
	requireError(t, b.request(t, http.MethodPatch, "/schedules/life", "admin", map[string]any{"job": map[string]any{
		"type": "noop", "agent": "alice"}}), http.StatusBadRequest, CodeInvalidRequest, "job.payload")
	requireError(t, b.request(t, http.MethodPatch, "/schedules/nope", "admin", map[string]any{"paused": true}),
		http.StatusNotFound, CodeNotFound, "")

	rec = b.request(t, http.MethodPost, "/schedules/life/pause", "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	got = decode[wire.Schedule](t, rec)
	require.True(t, got.Paused)
	require.Empty(t, got.NextRuns)

	// A trigger fires even paused; the fire shows as the last one.
	rec = b.request(t, http.MethodPost, "/schedules/life/trigger", "admin", nil)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	fire := decode[wire.ScheduleFire](t, rec)
	require.True(t, strings.HasPrefix(fire.JobID, "sch-life-t"), fire.JobID)
	job, err := b.st.JobGet(ctx, fire.JobID)
	require.NoError(t, err)
	require.Equal(t, "alice", job.Agent)
	require.Equal(t, store.JobPending, job.Status)
	rec = b.request(t, http.MethodGet, "/schedules/life", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	got = decode[wire.Schedule](t, rec)
	require.NotNil(t, got.LastFire)
	require.Equal(t, fire.JobID, got.LastFire.JobID)
	require.Equal(t, "pending", got.LastFire.JobStatus)
	require.Equal(t, fire.FireTime, got.LastFire.FireTime)
	require.Equal(t, 1, got.Running)

	rec = b.request(t, http.MethodPost, "/schedules/life/resume", "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Len(t, decode[wire.Schedule](t, rec).NextRuns, 5)

	require.Equal(t, http.StatusNoContent, b.request(t, http.MethodDelete, "/schedules/life", "admin", nil).Code)
	requireError(t, b.request(t, http.MethodGet, "/schedules/life", "admin", nil), http.StatusNotFound, CodeNotFound, "")
	requireError(t, b.request(t, http.MethodDelete, "/schedules/life", "admin", nil), http.StatusNotFound, CodeNotFound, "")
	_, err = b.st.JobGet(ctx, fire.JobID)
	require.NoError(t, err, "the jobs it made stay")

	// The audit trail has each admin action.
	evs, err := b.st.AuditList(ctx, store.AuditListParams{Limit: 1000})
	require.NoError(t, err)
	var types []string
	for _, ev := range evs {
		if strings.HasPrefix(ev.EventType, "schedule.") && strings.Contains(string(ev.Details), `"life"`) {
			types = append(types, ev.EventType)
		}
	}
	require.Equal(t, []string{"schedule.created", "schedule.updated", "schedule.paused", "schedule.fired", "schedule.resumed",
		"schedule.deleted"}, types)
}
