package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestJobsWatch(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("DoneFollowsEveryEvent", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "watch-done", "ops")
		b.done(t, id, `{}`)
		r := b.run(t, "jobs", "watch", id)
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Contains(t, r.stdout, "job.submitted")
		require.Contains(t, r.stdout, "job.running->done")
		require.Contains(t, r.stdout, "job "+id+" is done")
	})

	t.Run("JSONLinesAndSince", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "watch-json", "ops")
		b.deadLetter(t, id, "broken")
		r := b.run(t, "jobs", "watch", id, "-o", "json")
		require.Equal(t, exitDeadLetter, r.code, "%s", r)
		var evs []client.Event
		sc := bufio.NewScanner(strings.NewReader(r.stdout))
		for sc.Scan() {
			var ev client.Event
			require.NoError(t, json.Unmarshal(sc.Bytes(), &ev), sc.Text())
			evs = append(evs, ev)
		}
		require.NotEmpty(t, evs)
		require.Equal(t, "job.submitted", evs[0].EventType)
		require.Contains(t, evs[len(evs)-1].EventType, "dead_letter")

		// From after the first event: everything but the first.
		r = b.run(t, "jobs", "watch", id, "-o", "json", "--since", jsonInt(evs[0].ID))
		require.Equal(t, exitDeadLetter, r.code, "%s", r)
		require.Equal(t, len(evs)-1, strings.Count(r.stdout, "\n"))
	})

	t.Run("UnknownJob", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, "jobs", "watch", "no-such-job")
		require.Equal(t, exitAPI, r.code, "%s", r)
	})
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
