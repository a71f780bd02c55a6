package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// TestSchedules: create, list, get, update, pause, resume, trigger and delete a schedule
// through the CLI; an agent token lists its own and may not change one.
func TestSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.runOK(t, "schedules", "create", "nightly", "--cron", "30 2 * * *", "--timezone", "Europe/Berlin", "--type", "noop",
		"--agent", "alice", "--payload", `{"scope":"all"}`, "--max-concurrent", "1", "--on-overlap", "queue")
	require.Regexp(t, `(?m)^SCHEDULE\s+nightly$`, r.stdout)
	require.Regexp(t, `(?m)^MAX CONCURRENT\s+1 \(on overlap: queue\)$`, r.stdout)
	require.Regexp(t, `(?m)^NEXT RUNS\s+\S+T02:30:00\+0[12]:00, `, r.stdout, "in the schedule's zone")

	r = b.run(t, "schedules", "create", "bad", "--cron", "61 * * * *", "--type", "noop", "--agent", "alice")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "(field cron)")
	r = b.run(t, "schedules", "create", "bad", "--cron", "@hourly", "--type", "nope", "--agent", "alice")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "(field job.type)")

	rows := tableRows(t, b.runOK(t, "schedules", "list").stdout)
	require.Len(t, rows, 1)
	require.Equal(t, []string{"nightly", "30", "2", "*", "*", "*", "Europe/Berlin", "alice", "noop", "active"}, rows[0][:10])

	// update keeps the rest of the template.
	s := decodeJSON[client.Schedule](t, b.runOK(t, "schedules", "update", "nightly", "--priority", "5", "--cron", "@daily",
		"-o", "json"))
	require.Equal(t, "@daily", s.Cron)
	require.Equal(t, 5, *s.Job.Priority)
	require.JSONEq(t, `{"scope":"all"}`, string(s.Job.Payload))
	require.Equal(t, 1, s.MaxConcurrent)

	r = b.runOK(t, "schedules", "pause", "nightly")
	require.Regexp(t, `(?m)^STATE\s+paused$`, r.stdout)
	r = b.runOK(t, "schedules", "trigger", "nightly")
	fire := tableRows(t, r.stdout)[0]
	require.Equal(t, "nightly", fire[0])
	require.Regexp(t, `^sch-nightly-t\d+$`, fire[2])
	r = b.runOK(t, "schedules", "get", "nightly")
	require.Regexp(t, `(?m)^LAST FIRE\s+\S+\s+sch-nightly-t\d+ \(pending\)$`, r.stdout)
	r = b.runOK(t, "schedules", "resume", "nightly")
	require.Regexp(t, `(?m)^STATE\s+active$`, r.stdout)

	alice := func(args ...string) result {
		return orchctl(t, "", append([]string{"--api-url", b.url, "--token", b.alice}, args...)...)
	}
	r = alice("schedules", "list", "-o", "json")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Len(t, decodeJSON[client.ScheduleList](t, r).Schedules, 1)
	r = alice("schedules", "pause", "nightly")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "403")

	r = b.runOK(t, "__complete", "schedules", "get", "")
	require.Contains(t, r.stdout, "nightly\n")
	r = b.runOK(t, "schedules", "delete", "nightly")
	require.Contains(t, r.stderr, "deleted schedule nightly")
	r = b.run(t, "schedules", "get", "nightly")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "404 not_found")
}
