package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEmbeddedRestart: `orchestrator dev` on a fresh data directory, with no MariaDB and no
// Redis; 500 jobs submitted with orchctl; the orchestrator is killed with SIGKILL while jobs
// run and started again on the same directory. Every job ends done, none twice, no stream
// entry stays unacknowledged, and Ctrl-C (SIGTERM) then stops it cleanly.
func TestEmbeddedRestart(t *testing.T) {
	t.Parallel()
	c := newEmbedded(t, "")
	dev := c.startDev("dev-1")

	jobs := ids("emb", 500)
	submitted := make(chan int, 1)
	go func() {
		// One second per job at 20 at a time (the worker's concurrency): the 500 jobs take
		// about 25 s to run, longer than orchctl takes to submit them, so the worker is busy
		// and the kill below lands while jobs are claimed and running. 25 producers, because
		// an orchctl built with -race takes about a second just to start.
		submitted <- c.submitWithOrchctl("sleep", `{"ms": 1000}`, jobs, 25, 4*time.Minute)
	}()
	// Jobs run in waves of 20 that end together; wait for a wave in the middle of running.
	before := c.waitCount(2*time.Minute, "100 jobs done and 10 in flight", func(m map[string]int) bool {
		return m["done"] >= 100 && m["claimed"]+m["running"] >= 10
	})
	dev.kill()
	t.Logf("killed dev-1 with jobs by status %v", before)
	require.Less(t, before["done"], len(jobs), "the kill must land midway")

	dev2 := c.startDev("dev-2")
	failures := <-submitted
	t.Logf("orchctl submits that failed while the orchestrator was down: %d", failures)
	c.waitStatus("done", len(jobs), 3*time.Minute)

	counts := c.doneAuditCounts()
	require.Len(t, counts, len(jobs))
	for id, n := range counts {
		require.Equal(t, 1, n, "job %s done %d times", id, n)
	}
	require.Equal(t, map[string]int{"done": len(jobs)}, c.statusCounts())
	// The jobs the killed process's in-process worker held were rescued at the restart: failed
	// attempts, retried, never run to completion twice.
	rescued := c.auditCount("job.claimed->failed") + c.auditCount("job.running->failed")
	require.Positive(t, rescued, "jobs in flight at the kill were rescued")
	require.Eventually(t, func() bool {
		return c.pendingEntries(map[string]string{"sleep": "sleep"}) == 0
	}, 30*time.Second, 50*time.Millisecond, "stream entries left unacknowledged")

	require.NoError(t, dev2.terminate(t, 30*time.Second), "Ctrl-C drains and exits cleanly")
	require.True(t, logContains(dev2, "stopped"), "clean shutdown logged")
}

// TestEmbeddedDataDirLocked: a second `orchestrator dev` on the same data directory refuses to
// start, naming the holder, and leaves the first one alone; once the first has stopped, the
// directory can be used again.
func TestEmbeddedDataDirLocked(t *testing.T) {
	t.Parallel()
	c := newEmbedded(t, "")
	first := c.startDev("dev-1")

	// Other ports, so that only the data directory is shared.
	second := c.start("dev-2", "orchestrator", []string{
		"ORCH_HTTP_ADDR=" + freeAddr(t), "ORCH_EMBEDDED_REDIS_ADDR=" + freeAddr(t),
	}, "dev")
	err := second.waitExit(t, time.Minute)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the second orchestrator exits with an error, got %v", err)
	require.NotZero(t, exit.ExitCode())
	want := fmt.Sprintf("another orchestrator is using data directory %s (pid %d)",
		filepath.Join(c.dir, "data"), first.cmd.Process.Pid)
	require.True(t, logContains(second, want), "message %q in the second's output", want)
	require.True(t, logContains(second, "ORCH_DATA_DIR"), "the message says how to proceed")

	// The first is unaffected: it still serves. Each step has its own deadline, generous for
	// a loaded machine (orchctl built with -race takes a second just to start), and says
	// which step was slow.
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.orchctl(ctx, "jobs", "submit", "--type", "noop", "--agent", "e2e", "--job-id", "after-refusal", "--wait", "-q")
	require.NoError(t, err, "orchctl submit --wait against the first orchestrator, after %s: %s",
		time.Since(began).Round(time.Millisecond), out)
	require.Equal(t, 1, c.statusCounts()["done"])

	require.NoError(t, first.terminate(t, time.Minute))
	c.startDev("dev-3")
	began = time.Now()
	getCtx, cancelGet := context.WithTimeout(context.Background(), time.Minute)
	defer cancelGet()
	job, err := c.api.GetJob(getCtx, "after-refusal")
	require.NoError(t, err, "GET the job from the restarted orchestrator, after %s", time.Since(began).Round(time.Millisecond))
	require.Equal(t, "done", job.Status)
	require.Equal(t, 1, job.Attempts)
}
