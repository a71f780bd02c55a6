package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/internal/testenv"
)

func TestJobsWait(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// wait runs `jobs wait` with a short poll; the generous timeout is never reached.
	wait := func(t *testing.T, args ...string) result {
		t.Helper()
		return b.run(t, append([]string{"jobs", "wait", "--poll", "20ms", "--wait-timeout", "1m"}, args...)...)
	}

	t.Run("Done", func(t *testing.T) {
		t.Parallel()
		a, c := b.submit(t, "wait-done-a", "ops"), b.submit(t, "wait-done-b", "ops")
		b.done(t, a, `{}`)
		b.done(t, c, `{}`)
		r := wait(t, a, c, a)
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Regexp(t, `^JOB ID\s+TYPE\s+STATUS\s+ATTEMPTS\s+FINISHED\s+LAST ERROR\n`+
			`wait-done-a\s+noop\s+done\s+1/3\s+\d+s ago\s+-\n`+
			`wait-done-b\s+noop\s+done\s+1/3\s+\d+s ago\s+-\n$`, r.stdout, "each job once, in the order given")
		require.Empty(t, r.stderr, "finished at the first poll: no progress line")
	})

	t.Run("DoneWhileWaiting", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "wait-later", "ops")
		var stdout, stderr testenv.SyncBuffer
		codes := make(chan int, 1)
		go func() {
			codes <- run([]string{"--api-url", b.url, "--token", b.admin, "jobs", "wait", id,
				"--poll", "20ms", "--wait-timeout", "1m", "-o", "json"}, strings.NewReader(""), &stdout, &stderr)
		}()
		// The first poll saw the job pending; only a later poll can see it done.
		require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "waiting: 0/1 finished: 1 pending") },
			30*time.Second, 10*time.Millisecond)
		b.done(t, id, `{"ok": true}`)
		r := result{code: <-codes, stdout: stdout.String(), stderr: stderr.String()}
		require.Equal(t, exitOK, r.code, "%s", r)
		list := decodeJSON[client.JobList](t, r)
		require.Len(t, list.Jobs, 1)
		require.Equal(t, "done", list.Jobs[0].Status)
	})

	t.Run("CancelledExits4", func(t *testing.T) {
		t.Parallel()
		done, cancelled := b.submit(t, "wait-c-done", "ops"), b.submit(t, "wait-c-cancel", "ops")
		b.done(t, done, `{}`)
		b.runOK(t, "jobs", "cancel", cancelled)
		r := wait(t, done, cancelled)
		require.Equal(t, exitCancelled, r.code, "%s", r)
		require.Equal(t, "orchctl: 1 of 2 jobs were cancelled: wait-c-cancel\n", r.stderr)
		require.Regexp(t, `wait-c-cancel\s+noop\s+cancelled\s+0/3`, r.stdout)
	})

	t.Run("DeadLetterExits3", func(t *testing.T) {
		t.Parallel()
		dead, cancelled := b.submit(t, "wait-dl", "ops"), b.submit(t, "wait-dl-cancel", "ops")
		b.deadLetter(t, dead, "model not found")
		b.runOK(t, "jobs", "cancel", cancelled)
		r := wait(t, cancelled, dead)
		require.Equal(t, exitDeadLetter, r.code, "dead_letter outranks cancelled: %s", r)
		require.Equal(t, "orchctl: 1 of 2 jobs ended in dead_letter: wait-dl\n", r.stderr)
		require.Regexp(t, `wait-dl\s+noop\s+dead_letter\s+1/3\s+\d+s ago\s+model not found\n`, r.stdout)
	})

	t.Run("TimeoutExits5", func(t *testing.T) {
		t.Parallel()
		done, pending := b.submit(t, "wait-t-done", "ops"), b.submit(t, "wait-t-pending", "ops")
		b.done(t, done, `{}`)
		r := b.run(t, "jobs", "wait", done, pending, "--poll", "20ms", "--wait-timeout", "200ms")
		require.Equal(t, exitTimeout, r.code, "%s", r)
		require.Regexp(t, `^waiting: 1/2 finished: 1 done, 1 pending \(\d+s\)\n`, r.stderr,
			"stderr is no terminal: a plain progress line")
		require.Contains(t, r.stderr, "orchctl: timed out after 200ms: 1 of 2 jobs not finished: wait-t-pending\n")
		require.Regexp(t, `wait-t-pending\s+noop\s+pending\s+0/3\s+-\s+-\n`, r.stdout)
	})

	t.Run("TimeoutJSON", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "wait-t-json", "ops")
		r := b.run(t, "jobs", "wait", id, "--poll", "20ms", "--wait-timeout", "100ms", "-o", "json")
		require.Equal(t, exitTimeout, r.code, "%s", r)
		list := decodeJSON[client.JobList](t, r)
		require.Equal(t, "pending", list.Jobs[0].Status)
	})

	t.Run("UnknownJobExits2", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "wait-known", "ops")
		r := wait(t, id, "wait-unknown")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "orchctl: get job wait-unknown: 404 not_found")
		require.Empty(t, r.stdout)
	})

	t.Run("DeprecatedTimeoutStillWorks", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "wait-t-old", "ops")
		r := b.run(t, "jobs", "wait", id, "--poll", "20ms", "--timeout", "100ms")
		require.Equal(t, exitTimeout, r.code, "%s", r)
		require.Contains(t, r.stderr, "orchctl: --timeout is deprecated for orchctl jobs wait: use --wait-timeout")
		require.Contains(t, r.stderr, "orchctl: timed out after 100ms: 1 of 1 jobs not finished: wait-t-old\n")
		r = b.run(t, "jobs", "wait", id, "--timeout", "1s", "--wait-timeout", "1s")
		require.Equal(t, exitUsage, r.code, "both spellings at once: %s", r)
	})

	t.Run("UsageErrors", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, "jobs", "wait")
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "requires at least 1 arg(s)")
		r = b.run(t, "jobs", "wait", "x", "--poll", "0s")
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "orchctl: --poll must be positive\n")
		r = b.run(t, "jobs", "wait", "x", "--wait-timeout", "0s")
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "orchctl: --wait-timeout must be positive\n")
	})
}

// TestOneNameForTheWaitTimeout: --wait-timeout is how long a wait may last on every command
// that waits; a visible --timeout is a job's run-time limit only (jobs submit), and the waits'
// old --timeout is hidden.
func TestOneNameForTheWaitTimeout(t *testing.T) {
	t.Parallel()
	root := newRootCmd(&globals{getenv: func(string) string { return "" }})
	var waits []string
	walk(root, func(c *cobra.Command) {
		path := c.CommandPath()
		if f := c.Flags().Lookup("timeout"); f != nil && !f.Hidden {
			require.Equal(t, "orchctl jobs submit", path, "--timeout is a job's run-time limit only")
			require.Contains(t, f.Usage, "run-time limit")
		}
		if c.Flags().Lookup("poll") == nil {
			return
		}
		waits = append(waits, path)
		f := c.Flags().Lookup("wait-timeout")
		require.NotNil(t, f, "%s waits: --wait-timeout", path)
		require.Contains(t, f.Usage, "give up after this long", path)
		if path != "orchctl jobs submit" { // whose --timeout is the job's run-time limit
			require.NotContains(t, c.Long+c.Use+c.Example, "--timeout", "%s names its wait limit --wait-timeout", path)
		}
	})
	require.ElementsMatch(t, []string{"orchctl jobs submit", "orchctl jobs wait", "orchctl dlq replay",
		"orchctl pools drain", "orchctl pools evict", "orchctl control drain"}, waits)
}

func TestWaitVerdict(t *testing.T) {
	t.Parallel()
	job := func(id, status string) client.Job { return client.Job{JobID: id, Status: status} }
	for _, tc := range []struct {
		name     string
		jobs     []client.Job
		timedOut bool
		code     int
		msg      string
	}{
		{"AllDone", []client.Job{job("a", "done"), job("b", "done")}, false, exitOK, ""},
		{"Cancelled", []client.Job{job("a", "done"), job("b", "cancelled")}, false, exitCancelled,
			"1 of 2 jobs were cancelled: b"},
		{"DeadLetterOutranksCancelled", []client.Job{job("a", "cancelled"), job("b", "dead_letter")}, false, exitDeadLetter,
			"1 of 2 jobs ended in dead_letter: b"},
		{"Timeout", []client.Job{job("a", "done"), job("b", "running")}, true, exitTimeout,
			"timed out after 1m0s: 1 of 2 jobs not finished: b"},
		{"FailureOutranksTimeout", []client.Job{job("a", "cancelled"), job("b", "running")}, true, exitCancelled,
			"1 of 2 jobs were cancelled: a; timed out after 1m0s: 1 of 2 jobs not finished: b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := waitVerdict(tc.jobs, tc.timedOut, time.Minute)
			if tc.code == exitOK {
				require.NoError(t, err)
				return
			}
			var exit *exitError
			require.ErrorAs(t, err, &exit)
			require.Equal(t, tc.code, exit.code)
			require.Equal(t, tc.msg, exit.msg)
		})
	}
}

func TestListIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a, b", listIDs([]string{"a", "b"}))
	require.Equal(t, "1, 2, 3, 4, 5 and 2 more", listIDs([]string{"1", "2", "3", "4", "5", "6", "7"}))
	require.Equal(t, []string{"a", "b"}, dedupe([]string{"a", "b", "a"}))
}
