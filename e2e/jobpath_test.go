package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

var servedStreams = map[string]string{"noop": "noop", "sleep": "sleep", "echo": "echo"}

// TestEndToEnd: an orchestrator and two workers run 2,000 noop and 50 exec jobs submitted over
// HTTP; every job ends done exactly once and no stream entry is left pending.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "")
	c.startOrchestrator("orchestrator")
	w1, w2 := c.startWorker("worker-1"), c.startWorker("worker-2")

	noops, echos := ids("noop", 2000), ids("echo", 50)
	c.submitMany("noop", noops, func(int) string { return `{}` }, 16)
	c.submitMany("echo", echos, func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) }, 4)
	c.waitStatus("done", len(noops)+len(echos), 3*time.Minute)

	counts := c.doneAuditCounts()
	require.Len(t, counts, len(noops)+len(echos))
	for id, n := range counts {
		require.Equal(t, 1, n, "job %s done %d times", id, n)
	}
	for i, id := range echos {
		job, err := c.api.GetJob(context.Background(), id)
		require.NoError(t, err)
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(job.Result), "exec result is the command's stdout")
		require.Equal(t, 1, job.Attempts)
	}
	require.Eventually(t, func() bool { return c.pendingEntries(servedStreams) == 0 },
		30*time.Second, 50*time.Millisecond, "stream entries left unacknowledged")

	// Both workers took part, and both stop cleanly on SIGTERM.
	var byWorker = map[string]int{}
	rows, err := c.db.Query(`SELECT worker_id, COUNT(*) FROM orchestrator_jobs GROUP BY worker_id`)
	require.NoError(t, err)
	for rows.Next() {
		var w string
		var n int
		require.NoError(t, rows.Scan(&w, &n))
		byWorker[w] = n
	}
	require.NoError(t, rows.Close())
	require.Len(t, byWorker, 2, "jobs by worker: %v", byWorker)
	require.NoError(t, w1.terminate(t, 30*time.Second))
	require.NoError(t, w2.terminate(t, 30*time.Second))
}

// TestWorkerKilled: a worker killed with SIGKILL in the middle of sleep jobs stops renewing
// their leases; once the TTL has passed the purger expires them and rescues the jobs (a failed
// attempt, "worker lost", back to pending with backoff), while every other job completes on
// another worker. The survivor does not serve sleep jobs, so the rescued jobs wait, pending.
func TestWorkerKilled(t *testing.T) {
	t.Parallel()
	c := newCluster(t, shortLeases)
	c.startOrchestrator("orchestrator")
	victim := c.startWorker("victim", "ORCH_WORKER_CONCURRENCY=4", "ORCH_WORKER_TYPES=sleep")

	sleeps := ids("sleep", 4)
	c.submitMany("sleep", sleeps, func(int) string { return `{"ms": 600000}` }, 4)
	c.waitStatus("running", 4, time.Minute)
	victim.kill()

	c.startWorker("survivor", "ORCH_WORKER_TYPES=noop")
	noops := ids("noop", 200)
	c.submitMany("noop", noops, func(int) string { return `{}` }, 8)
	c.waitStatus("done", len(noops), 2*time.Minute)
	c.waitStatus("pending", len(sleeps), time.Minute)

	for _, id := range sleeps {
		job, err := c.api.GetJob(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, "pending", job.Status, "job %s", id)
		require.Equal(t, 1, job.Attempts)
		require.Equal(t, "worker lost", job.LastError)
		require.Empty(t, job.WorkerID)
		require.Contains(t, c.auditTypes(id), "job.running->failed", "the killed attempt is in the audit trail")
		// A job without a GPU holds its lease in its row; its expiry is in the audit trail.
		require.Contains(t, c.auditTypes(id), "lease.expired", "the victim's lease of %s expired", id)
	}
	require.Equal(t, map[string]int{"done": len(noops), "pending": len(sleeps)}, c.statusCounts())
}

// TestOrchestratorRestart: the orchestrator is killed with SIGKILL while jobs are queued and
// being worked; after its restart nothing is lost and every job completes exactly once.
func TestOrchestratorRestart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "")
	orch := c.startOrchestrator("orchestrator-1")

	queued := ids("queued", 300)
	c.submitMany("noop", queued, func(int) string { return `{}` }, 8)
	c.startWorker("worker-1")
	more := ids("more", 700)
	c.submitMany("noop", more, func(int) string { return `{}` }, 8)
	orch.kill()

	// While the orchestrator is down the worker keeps retrying its calls.
	c.startOrchestrator("orchestrator-2")
	late := ids("late", 300)
	c.submitMany("noop", late, func(int) string { return `{}` }, 8)
	total := len(queued) + len(more) + len(late)
	c.waitStatus("done", total, 3*time.Minute)
	for id, n := range c.doneAuditCounts() {
		require.Equal(t, 1, n, "job %s done %d times", id, n)
	}
	require.Eventually(t, func() bool { return c.pendingEntries(servedStreams) == 0 },
		30*time.Second, 50*time.Millisecond)
}

// TestSubmitBadInput: each malformed submit gets a 400 naming the field and leaves no row.
func TestSubmitBadInput(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "")
	c.startOrchestrator("orchestrator")
	cases := []struct {
		name, body, field string
	}{
		{"MissingType", `{"job_id":"b1","agent":"a","payload":{}}`, "type"},
		{"UnknownType", `{"job_id":"b2","type":"nope","agent":"a","payload":{}}`, "type"},
		{"MissingAgent", `{"job_id":"b3","type":"noop","payload":{}}`, "agent"},
		{"MissingPayload", `{"job_id":"b4","type":"noop","agent":"a"}`, "payload"},
		{"BadJobID", `{"job_id":"bad id!","type":"noop","agent":"a","payload":{}}`, "job_id"},
		{"UnknownField", `{"job_id":"b6","type":"noop","agent":"a","payload":{},"prio":1}`, "prio"},
		{"BadMaxAttempts", `{"job_id":"b7","type":"noop","agent":"a","payload":{},"max_attempts":0}`, "max_attempts"},
		{"BadTimeout", `{"job_id":"b8","type":"noop","agent":"a","payload":{},"timeout":"forever"}`, "timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := c.rawPost(t, "/jobs/submit", tc.body)
			require.Equal(t, 400, status, body)
			var eb client.ErrorBody
			require.NoError(t, json.Unmarshal([]byte(body), &eb), body)
			require.Equal(t, tc.field, eb.Error.Field, body)
		})
	}
	require.Empty(t, c.statusCounts(), "a rejected submit leaves no row")
}
