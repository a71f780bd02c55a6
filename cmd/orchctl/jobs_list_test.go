package main

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestJobsList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, b.submit(t, fmt.Sprintf("list-%d", i), "lister"))
	}
	b.submit(t, "other-agent", "someone-else")
	b.deadLetter(t, "list-0", "boom: bad input")

	// rowIDs are the job ids of a list table, in order.
	rowIDs := func(t *testing.T, r result) []string {
		t.Helper()
		var out []string
		for _, row := range tableRows(t, r.stdout) {
			out = append(out, row[0])
		}
		return out
	}

	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		r := b.runOK(t, "jobs", "list", "--agent", "lister")
		require.Regexp(t, `^JOB ID\s+TYPE\s+AGENT\s+STATUS\s+ATTEMPTS\s+WORKER\s+AGE\s+LAST ERROR\n`, r.stdout)
		require.ElementsMatch(t, ids, rowIDs(t, r), "%s", r)
		require.Regexp(t, `list-0\s+noop\s+lister\s+dead_letter\s+1/3\s+w1\s+\d+s\s+boom: bad input\n`, r.stdout)
		require.Empty(t, r.stderr, "one page: no cursor hint")
	})

	t.Run("JSONParsesBack", func(t *testing.T) {
		t.Parallel()
		list := decodeJSON[client.JobList](t, b.runOK(t, "jobs", "list", "--agent", "lister", "-o", "json"))
		require.Len(t, list.Jobs, 5)
		require.Empty(t, list.NextCursor)
		for _, j := range list.Jobs {
			require.Equal(t, "lister", j.Agent)
			require.Equal(t, "noop", j.Type)
		}
	})

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		r := b.runOK(t, "jobs", "list", "--status", "dead_letter")
		require.Equal(t, []string{"list-0"}, rowIDs(t, r))
		r = b.runOK(t, "jobs", "list", "--type", "noop", "--status", "pending", "--agent", "someone-else")
		require.Equal(t, []string{"other-agent"}, rowIDs(t, r))

		r = b.run(t, "jobs", "list", "--status", "bogus")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "(field status)")
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		r := b.runOK(t, "jobs", "list", "--agent", "nobody")
		require.Empty(t, r.stdout)
		require.Equal(t, "no jobs\n", r.stderr)

		list := decodeJSON[client.JobList](t, b.runOK(t, "jobs", "list", "--agent", "nobody", "-o", "json"))
		require.NotNil(t, list.Jobs, `an empty list is "jobs": [], not null`)
		require.Empty(t, list.Jobs)
	})

	t.Run("PagesWithCursor", func(t *testing.T) {
		t.Parallel()
		r := b.runOK(t, "jobs", "list", "--agent", "lister", "--limit", "2")
		require.Len(t, rowIDs(t, r), 2)
		require.Regexp(t, `^more jobs follow: add --cursor \S+ \(or use --all\)\n$`, r.stderr)

		var seen []string
		cursor := ""
		for range 3 {
			args := []string{"jobs", "list", "--agent", "lister", "--limit", "2", "-o", "json"}
			if cursor != "" {
				args = append(args, "--cursor", cursor)
			}
			page := decodeJSON[client.JobList](t, b.runOK(t, args...))
			for _, j := range page.Jobs {
				seen = append(seen, j.JobID)
			}
			cursor = page.NextCursor
		}
		require.Empty(t, cursor, "three pages of 2 hold 5 jobs")
		require.ElementsMatch(t, ids, seen)
	})

	t.Run("AllFollowsEveryPage", func(t *testing.T) {
		t.Parallel()
		r := b.runOK(t, "jobs", "list", "--agent", "lister", "--limit", "2", "--all")
		require.ElementsMatch(t, ids, rowIDs(t, r), "%s", r)
		require.Empty(t, r.stderr)

		list := decodeJSON[client.JobList](t, b.runOK(t, "jobs", "list", "--agent", "lister", "--limit", "2", "--all", "-o", "json"))
		got := make([]string, 0, len(list.Jobs))
		for _, j := range list.Jobs {
			got = append(got, j.JobID)
		}
		require.ElementsMatch(t, ids, got)
		require.Len(t, slices.Compact(slices.Sorted(slices.Values(got))), 5, "no job twice")
		require.Empty(t, list.NextCursor)
	})

	t.Run("AgentTokenSeesOwnJobsOnly", func(t *testing.T) {
		t.Parallel()
		b.submit(t, "alice-job", "alice")
		r := orchctl(t, "", "--api-url", b.url, "--token", b.alice, "jobs", "list")
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Equal(t, []string{"alice-job"}, rowIDs(t, r))
	})
}
