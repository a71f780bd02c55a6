package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestDLQList(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	r := b.runOK(t, "dlq", "list")
	require.Contains(t, r.stderr, "no dead letters")

	for _, d := range []struct{ id, agent, msg string }{
		{"dl-1", "etl", "connection refused"}, {"dl-2", "etl", "bad input"}, {"dl-3", "chat", "connection refused"},
	} {
		b.submit(t, d.id, d.agent)
		b.deadLetter(t, d.id, d.msg)
	}

	r = b.runOK(t, "dlq", "list")
	rows := tableRows(t, r.stdout)
	require.Len(t, rows, 3, "%s", r)
	require.Equal(t, []string{"dl-3", "noop", "chat", "1/3"}, rows[0][:4], "newest first: %s", r)

	page := decodeJSON[client.DeadLetterList](t, b.runOK(t, "dlq", "list", "--agent", "etl", "--error-contains", "refused", "-o", "json"))
	require.Len(t, page.DeadLetters, 1)
	require.Equal(t, "dl-1", page.DeadLetters[0].JobID)
	require.Equal(t, "connection refused", page.DeadLetters[0].LastError)

	r = b.runOK(t, "dlq", "list", "--limit", "2")
	require.Len(t, tableRows(t, r.stdout), 2)
	require.Contains(t, r.stderr, "more dead letters follow: add --cursor ")
	page = decodeJSON[client.DeadLetterList](t, b.runOK(t, "dlq", "list", "--limit", "1", "--all", "-o", "json"))
	require.Len(t, page.DeadLetters, 3)
	require.Empty(t, page.NextCursor)

	r = b.run(t, "dlq", "list", "--all", "--cursor", "x")
	require.Equal(t, exitUsage, r.code, "%s", r)
}

func TestDLQReplayPurge(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	dead := func(id, agent, msg string) {
		b.submit(t, id, agent)
		b.deadLetter(t, id, msg)
	}

	t.Run("ReplayOneThenAgain", func(t *testing.T) {
		t.Parallel()
		dead("rp-1", "ops", "boom")
		r := b.runOK(t, "dlq", "replay", "rp-1")
		require.Equal(t, []string{"rp-1", "noop", "pending", "1/4", "replayed"}, tableRows(t, r.stdout)[0], "%s", r)
		require.Equal(t, "pending", string(b.get(t, "rp-1").Status))

		r = b.run(t, "dlq", "replay", "rp-1")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "409 not_dead_letter")
	})

	t.Run("SomeFailExits6", func(t *testing.T) {
		t.Parallel()
		dead("rp-2", "ops", "boom")
		r := b.run(t, "dlq", "replay", "rp-2", "no-such-job", "-o", "json")
		require.Equal(t, exitPartial, r.code, "%s", r)
		doc := decodeJSON[dlqResults](t, r)
		require.Equal(t, outcomeReplayed, doc.Results[0].Outcome)
		require.Equal(t, "pending", doc.Results[0].Job.Status)
		require.Equal(t, outcomeFailed, doc.Results[1].Outcome)
		require.Contains(t, doc.Results[1].Error, "404 not_found")
	})

	t.Run("ReplayAllMatchingAndWait", func(t *testing.T) {
		t.Parallel()
		dead("fix-1", "fixme", "upstream 503")
		dead("fix-2", "fixme", "upstream 503")
		dead("fix-3", "fixme", "bad payload")
		results := make(chan result, 1)
		go func() {
			results <- b.run(t, "dlq", "replay", "--all", "--agent", "fixme", "--error-contains", "503",
				"--wait", "--poll", "20ms", "--wait-timeout", "1m")
		}()
		for _, id := range []string{"fix-1", "fix-2"} {
			require.Eventually(t, func() bool { return b.get(t, id).Status == "pending" }, 30*time.Second, 10*time.Millisecond)
			b.done(t, id, `{}`)
		}
		r := <-results
		require.Equal(t, exitOK, r.code, "%s", r)
		rows := tableRows(t, r.stdout)
		require.Len(t, rows, 2, "the wait's table: %s", r)
		require.Equal(t, "done", rows[0][2])
		require.Equal(t, "dead_letter", string(b.get(t, "fix-3").Status), "not matched, not replayed")
	})

	t.Run("ReplayWaitDeadAgainExits3", func(t *testing.T) {
		t.Parallel()
		dead("again-1", "ops", "flaky")
		results := make(chan result, 1)
		go func() { results <- b.run(t, "dlq", "replay", "again-1", "--wait", "--poll", "20ms", "-o", "json") }()
		require.Eventually(t, func() bool { return b.get(t, "again-1").Status == "pending" }, 30*time.Second, 10*time.Millisecond)
		b.deadLetter(t, "again-1", "still flaky")
		r := <-results
		require.Equal(t, exitDeadLetter, r.code, "%s", r)
		list := decodeJSON[client.JobList](t, r)
		require.Equal(t, "dead_letter", list.Jobs[0].Status)
		require.Equal(t, "still flaky", list.Jobs[0].LastError)
	})

	t.Run("Purge", func(t *testing.T) {
		t.Parallel()
		dead("pg-1", "purger", "obsolete")
		dead("pg-2", "purger", "obsolete")
		doc := decodeJSON[dlqResults](t, b.runOK(t, "dlq", "purge", "--all", "--agent", "purger", "-o", "json"))
		require.Len(t, doc.Results, 2)
		for _, res := range doc.Results {
			require.Equal(t, outcomePurged, res.Outcome)
			require.Equal(t, "dead_letter", res.Job.Status, "the row stays dead_letter")
		}
		r := b.runOK(t, "dlq", "list", "--agent", "purger")
		require.Empty(t, r.stdout, "purged dead letters leave the queue")

		r = b.run(t, "dlq", "purge", "pg-1")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "409 not_dead_letter")
		r = b.run(t, "dlq", "replay", "pg-2")
		require.Equal(t, exitAPI, r.code, "a purged dead letter cannot be replayed: %s", r)
	})

	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"dlq", "replay"},
			{"dlq", "replay", "--all", "x"},
			{"dlq", "purge", "x", "--type", "noop"},
			{"dlq", "replay", "x", "--wait", "--poll", "0s"},
		} {
			r := b.run(t, args...)
			require.Equal(t, exitUsage, r.code, "%v: %s", args, r)
		}
	})

	t.Run("AgentTokenIsRefused", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "--api-url", b.url, "--token", b.alice, "dlq", "replay", "x", "y")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Equal(t, 1, strings.Count(r.stderr, "403 forbidden"), "one refusal ends the batch: %s", r)
		require.Contains(t, r.stderr, "hint: the token of --token / $ORCH_API_TOKEN may not do this")
	})
}
