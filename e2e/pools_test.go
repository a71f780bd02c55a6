package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// poolsConfig makes the pool machinery fast: heartbeats every 200ms (offline after 600ms), a
// reconcile pass every 300ms, and short graces. The local provisioner starts the `worker`
// binary built next to `orchestrator`.
const poolsConfig = `
pools:
  provisioner: local
  heartbeat_interval: 200ms
  offline_heartbeats: 3
  reconcile_interval: 300ms
  drain_grace: 20s
  evict_grace: 2s
  restart_backoff_max: 2s
`

// newPoolCluster prepares a MariaDB deployment whose orchestrators run the local provisioner.
func newPoolCluster(t *testing.T) *cluster {
	t.Helper()
	c := newCluster(t, poolsConfig)
	// The workers the orchestrator starts authenticate with the worker token (worker.api_token
	// of the orchestrator's configuration), and log under data_dir.
	c.env = append(c.env, "ORCH_API_TOKEN="+c.workerToken, "ORCH_DATA_DIR="+filepath.Join(c.dir, "data"))
	return c
}

// createPool posts a pool serving the sleep type.
func (c *cluster) createPool(id string, desired, hold int) client.PoolResponse {
	c.t.Helper()
	res, err := c.api.CreatePool(context.Background(), client.PoolRequest{PoolID: id, AgentName: "e2e",
		ModelID: "mistral-7b", Adapter: "vllm", Types: []string{"sleep"}, DesiredWorkers: desired, HoldSeconds: hold})
	require.NoError(c.t, err)
	return res
}

// pool reads a pool with its workers.
func (c *cluster) pool(id string) client.Pool {
	c.t.Helper()
	p, err := c.api.GetPool(context.Background(), id)
	require.NoError(c.t, err)
	return p
}

// liveWorkers returns the pool's registered workers that are not offline, by id.
func liveWorkers(p client.Pool) map[string]client.Worker {
	out := map[string]client.Worker{}
	for _, w := range p.Workers {
		if w.Status != client.WorkerOffline {
			out[w.WorkerID] = w
		}
	}
	return out
}

// waitPool polls the pool until cond holds, failing with its last state after d.
func (c *cluster) waitPool(id string, d time.Duration, what string, cond func(client.Pool) bool) client.Pool {
	c.t.Helper()
	var last client.Pool
	ok := pollUntil(d, func() bool {
		p, err := c.api.GetPool(context.Background(), id)
		last = p
		return err == nil && cond(p)
	})
	if !ok {
		raw, _ := json.MarshalIndent(last, "", "  ")
		c.t.Fatalf("pool %s: %s not reached within %s; last state:\n%s", id, what, d, raw)
	}
	return last
}

// pollUntil calls cond every 50ms until it holds or d passes.
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// alive reports whether a process with the pid exists (and is not a zombie we cannot reap).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command in parentheses: "pid (comm) S ...".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// workerExits returns the exit codes the orchestrator logged for local workers, by worker id.
func workerExits(p *proc) map[string]int {
	out := map[string]int{}
	f, err := os.Open(p.log)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg      string `json:"msg"`
			WorkerID string `json:"worker_id"`
			ExitCode *int   `json:"exit_code"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.ExitCode != nil &&
			(line.Msg == "worker exited" || line.Msg == "worker crashed; restarting after backoff") {
			out[line.WorkerID] = *line.ExitCode
		}
	}
	return out
}

// TestPoolLifecycle: a pool of 3 gets 3 worker processes; one killed with SIGKILL is replaced;
// scaled to 1 under load, two workers drain and exit 0 with every job done once; after the
// orchestrator is killed and restarted, the new leader adopts the live worker instead of
// starting another.
func TestPoolLifecycle(t *testing.T) {
	t.Parallel()
	c := newPoolCluster(t)
	orch := c.startOrchestrator("orchestrator-1")

	res := c.createPool("warm", 3, 0)
	require.True(t, res.Created)
	require.NotEmpty(t, res.PreloadID, "a preload event was written")
	p := c.waitPool("warm", 60*time.Second, "3 live workers, running", func(p client.Pool) bool {
		return len(liveWorkers(p)) == 3 && p.Status == client.PoolRunning && p.SpawnedWorkers == 3
	})
	first := liveWorkers(p)
	for id, w := range first {
		require.True(t, alive(w.PID), "worker %s (pid %d) is a live process", id, w.PID)
	}

	// kill -9 one: it goes offline and a fourth worker replaces it.
	var victim client.Worker
	for _, w := range first {
		victim = w
		break
	}
	require.NoError(t, syscall.Kill(victim.PID, syscall.SIGKILL))
	p = c.waitPool("warm", 60*time.Second, "the killed worker replaced", func(p client.Pool) bool {
		live := liveWorkers(p)
		_, stillLive := live[victim.WorkerID]
		return len(live) == 3 && !stillLive
	})
	require.False(t, alive(victim.PID))

	// Scale to 1 while sleep jobs run: two workers drain, deregister and exit 0; no job is lost.
	jobs := ids("scale", 40)
	c.submitMany("sleep", jobs, func(int) string { return `{"ms": 500}` }, 8)
	require.Eventually(t, func() bool { return c.statusCounts()["running"] > 0 }, 30*time.Second, 20*time.Millisecond)
	before := liveWorkers(p)
	c.createPool("warm", 1, 0)
	p = c.waitPool("warm", 60*time.Second, "one worker left", func(p client.Pool) bool {
		return len(p.Workers) == 2 && len(liveWorkers(p)) == 1 && p.SpawnedWorkers == 1
	})
	var kept client.Worker
	for _, w := range liveWorkers(p) {
		kept = w
	}
	require.Contains(t, before, kept.WorkerID, "a scale-down starts nobody")
	for id, w := range before {
		if id == kept.WorkerID {
			continue
		}
		require.True(t, pollUntil(30*time.Second, func() bool { _, ok := workerExits(orch)[id]; return ok }),
			"the exit of %s is logged", id)
		require.Zero(t, workerExits(orch)[id], "worker %s drained and exited cleanly", id)
		require.False(t, alive(w.PID))
	}
	c.waitStatus("done", len(jobs), 90*time.Second)
	for id, n := range c.doneAuditCounts() {
		require.Equal(t, 1, n, "job %s done %d times", id, n)
	}

	// The orchestrator dies alone (its workers live on); the next one adopts the live worker.
	require.NoError(t, orch.cmd.Process.Kill())
	<-orch.done
	require.True(t, alive(kept.PID), "the worker outlives the orchestrator")
	orch2 := c.startOrchestrator("orchestrator-2")
	t.Cleanup(func() {
		select {
		case <-orch2.done:
			t.Logf("orchestrator-2 exited before the end of the test: %v (%v)", orch2.err, orch2.cmd.ProcessState)
		default:
		}
	})
	restarted := time.Now()
	c.waitPool("warm", 30*time.Second, "the worker heartbeating to the new orchestrator", func(p client.Pool) bool {
		w, ok := liveWorkers(p)[kept.WorkerID]
		return ok && w.LastHeartbeat.After(restarted)
	})
	rec, err := c.api.Reconcile(context.Background())
	require.NoError(t, err)
	require.True(t, pollUntil(10*time.Second, func() bool {
		rec, err = c.api.Reconcile(context.Background())
		return err == nil && rec.Triggered
	}), "the new orchestrator leads")
	// Past the adoption window (600ms) and a few passes, still the one worker, alive.
	// (Polled in this goroutine: require.Never's condition may outlive it.)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		p := c.pool("warm")
		require.Len(t, liveWorkers(p), 1, "no duplicate worker after the restart")
		require.Equal(t, 1, p.SpawnedWorkers)
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
	require.True(t, alive(kept.PID))
}

// TestPoolDrainEvictHold: draining under load lets the jobs in flight finish and leaves the
// queued ones for another pool; evicting that pool under load stops it within its grace, and
// its jobs are rescued and finish on a third; an idle pool's hold expires into stopped.
func TestPoolDrainEvictHold(t *testing.T) {
	t.Parallel()
	c := newPoolCluster(t)
	c.startOrchestrator("orchestrator")

	// Drain under load: 40 jobs of 3s queued, then a pool of one worker that runs 20 at once.
	jobs := ids("load", 40)
	c.submitMany("sleep", jobs, func(int) string { return `{"ms": 3000}` }, 8)
	c.createPool("first", 1, 0)
	c.waitStatus("running", 20, 60*time.Second)
	change, err := c.api.DrainPool(context.Background(), "first")
	require.NoError(t, err)
	require.True(t, change.Changed)
	c.waitPool("first", 60*time.Second, "stopped", func(p client.Pool) bool {
		return p.Status == client.PoolStopped && len(p.Workers) == 0
	})
	require.Equal(t, map[string]int{"done": 20, "pending": 20}, c.statusCounts(),
		"the jobs in flight finished, the queued ones stay queued")

	// Another pool takes the queued jobs; evicted under load, it stops within its grace and
	// its jobs are rescued, to finish on a third pool.
	c.createPool("second", 1, 0)
	c.waitStatus("running", 20, 60*time.Second)
	w := only(t, liveWorkers(c.pool("second")))
	inFlight := c.jobsIn("claimed", "running")
	start := time.Now()
	change, err = c.api.EvictPool(context.Background(), "second")
	require.NoError(t, err)
	require.Equal(t, client.PoolEvicted, change.Pool.Status)
	require.True(t, pollUntil(10*time.Second, func() bool { return !alive(w.PID) }), "the evicted worker is gone")
	require.Less(t, time.Since(start), 2*time.Second+5*time.Second, "within the evict grace (and a pass)")
	c.waitPool("second", 30*time.Second, "no live worker", func(p client.Pool) bool {
		return len(liveWorkers(p)) == 0 && p.SpawnedWorkers == 0
	})
	require.Empty(t, c.jobsIn("claimed", "running"), "every job of the evicted pool was rescued")
	c.createPool("third", 1, 0)
	c.waitStatus("done", len(jobs), 60*time.Second)
	for _, id := range inFlight {
		job, err := c.api.GetJob(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, 2, job.Attempts, "job %s: the evicted attempt, then the one elsewhere", id)
		trail := strings.Join(c.auditTypes(id), " ")
		require.Contains(t, trail, "->failed", "job %s: the evicted attempt failed", id)
	}
	for id, n := range c.doneAuditCounts() {
		require.Equal(t, 1, n, "job %s done %d times", id, n)
	}

	// Hold: an idle pool drains after hold_seconds, then stops.
	c.createPool("idle", 1, 1)
	c.waitPool("idle", 60*time.Second, "stopped by its hold", func(p client.Pool) bool {
		return p.Status == client.PoolStopped && len(p.Workers) == 0
	})
	var trail []string
	rows, err := c.db.Query(`SELECT event_type FROM orchestrator_audit WHERE pool_id = 'idle' AND event_type LIKE 'pool.%' ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var e string
		require.NoError(t, rows.Scan(&e))
		trail = append(trail, e)
	}
	require.NoError(t, rows.Close())
	require.True(t, slices.Contains(trail, "pool.running->draining") || slices.Contains(trail, "pool.starting->draining"), "trail %v", trail)
	require.Equal(t, "pool.draining->stopped", trail[len(trail)-1], "trail %v", trail)
}

// jobsIn returns the ids of the jobs in the given states.
func (c *cluster) jobsIn(states ...string) []string {
	c.t.Helper()
	q := "SELECT job_id FROM orchestrator_jobs WHERE status IN ('" + strings.Join(states, "','") + "') ORDER BY job_id"
	rows, err := c.db.Query(q)
	require.NoError(c.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		require.NoError(c.t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(c.t, rows.Err())
	return out
}

// only returns the one worker of ws.
func only(t *testing.T, ws map[string]client.Worker) client.Worker {
	t.Helper()
	require.Len(t, ws, 1)
	for _, w := range ws {
		return w
	}
	return client.Worker{}
}
