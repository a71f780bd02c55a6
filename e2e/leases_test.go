package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/telemetry"
)

// shortLeases makes leases expire three seconds after their holder goes quiet, and the purger
// notice within a fifth of a second, so that rescues happen within the tests' patience.
const shortLeases = `
leases:
  ttl: 3s
  purge_interval: 200ms
telemetry:
  poll_interval: 500ms
`

// newGPUCluster is a cluster with short leases and two GPU job types: gpu_sleep (the sleep
// handler, 16 GB) and gpu_env (exec of env, 1 GB: its result is the environment the handler's
// process got).
func newGPUCluster(t *testing.T) *cluster {
	t.Helper()
	return newGPUClusterWith(t, "")
}

// newGPUClusterWith is newGPUCluster with extraConfig appended to its YAML (top-level keys
// that shortLeases does not set).
func newGPUClusterWith(t *testing.T, extraConfig string) *cluster {
	t.Helper()
	c := newCluster(t, shortLeases+extraConfig)
	cfg := strings.Replace(baseConfig, "job_types:\n", `job_types:
  gpu_sleep:
    handler: sleep
    gpu_memory_mb: 16000
    backoff: {initial: 200ms, max: 1s}
  gpu_env:
    handler: exec
    command: env
    gpu_memory_mb: 1000
`, 1)
	cfg = strings.Replace(cfg, "  commands:\n", "  commands:\n    env:\n      argv: [\"env\"]\n", 1)
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, "config.yaml"), []byte(cfg+shortLeases+extraConfig), 0o600))
	return c
}

// startGPUWorker starts a worker of the GPU types on node, with one simulated 24 GiB GPU and
// one job at a time (so that it never waits in a read while its job runs).
func (c *cluster) startGPUWorker(name, node string) *proc {
	return c.startWorker(name, "ORCH_NODE_ID="+node, "ORCH_SIM_GPUS=24576", "ORCH_WORKER_CONCURRENCY=1",
		"ORCH_WORKER_TYPES=gpu_sleep,gpu_env")
}

// startGPUNode starts worker name, of types (comma-separated) with concurrency slots, on node
// with gpus simulated 24 GiB GPUs, and waits until the node's fresh telemetry lists them all.
func (c *cluster) startGPUNode(name, node string, gpus, concurrency int, types string) *proc {
	c.t.Helper()
	return c.startSimNode(name, node, fmt.Sprintf("%dx24576", gpus), concurrency, types)
}

// startSimNode starts worker name, of types (comma-separated) with concurrency slots, on node
// with the simulated GPUs of spec (ORCH_SIM_GPUS: "2x81559", "24576,81920"), and waits until
// the node's fresh telemetry lists them all. extraEnv goes to the worker's environment.
func (c *cluster) startSimNode(name, node, spec string, concurrency int, types string, extraEnv ...string) *proc {
	c.t.Helper()
	sizes, err := telemetry.ParseSimGPUs(spec)
	require.NoError(c.t, err)
	gpus := len(sizes)
	p := c.startWorker(name, append([]string{"ORCH_NODE_ID=" + node, "ORCH_SIM_GPUS=" + spec,
		fmt.Sprintf("ORCH_WORKER_CONCURRENCY=%d", concurrency), "ORCH_WORKER_TYPES=" + types}, extraEnv...)...)
	require.Eventually(c.t, func() bool {
		list, err := c.api.ListGPUs(context.Background(), node)
		if err != nil || len(list.GPUs) != gpus {
			return false
		}
		for _, g := range list.GPUs {
			if !g.Fresh {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "worker %s never reported the GPUs of %s", name, node)
	return p
}

// auditTypes returns the audit event types of a job, oldest first.
func (c *cluster) auditTypes(jobID string) []string {
	return c.strings(`SELECT event_type FROM orchestrator_audit WHERE job_id = ? ORDER BY id`, jobID)
}

// strings returns the one string column of a query's rows, in order.
func (c *cluster) strings(query string, args ...any) []string {
	rows, err := c.db.Query(query, args...)
	require.NoError(c.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(c.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(c.t, rows.Err())
	return out
}

// waitJob polls a job until cond holds, failing with its last state after d.
func (c *cluster) waitJob(id string, d time.Duration, cond func(client.Job) bool) client.Job {
	t := c.t
	t.Helper()
	var job client.Job
	require.Eventually(t, func() bool {
		var err error
		job, err = c.api.GetJob(context.Background(), id)
		return err == nil && cond(job)
	}, d, 50*time.Millisecond, "job %s: last seen %+v", id, job)
	return job
}

// jobLeases returns the leases of a job, oldest first.
func (c *cluster) jobLeases(id string) []client.Lease {
	ls, err := c.api.ListLeases(context.Background(), client.ListLeasesParams{JobID: id})
	require.NoError(c.t, err)
	for i, j := 0, len(ls.Leases)-1; i < j; i, j = i+1, j-1 {
		ls.Leases[i], ls.Leases[j] = ls.Leases[j], ls.Leases[i]
	}
	return ls.Leases
}

// TestLeaseWorkerKilledJobRescued: a GPU job runs with CUDA_VISIBLE_DEVICES, ORCH_LEASE_TOKEN
// and ORCH_JOB_ID from its lease; a worker killed with SIGKILL in the middle of a GPU job
// stops renewing its lease, which expires after the TTL; the job is retried on another node's
// worker and ends done. The killed attempt stays in the audit trail.
func TestLeaseWorkerKilledJobRescued(t *testing.T) {
	t.Parallel()
	c := newGPUCluster(t)
	c.startOrchestrator("orchestrator")
	victim := c.startGPUWorker("victim", "node-a")

	// The handler's process sees its lease.
	c.submitMany("gpu_env", []string{"env-1"}, func(int) string { return `{}` }, 1)
	env := c.waitJob("env-1", time.Minute, func(j client.Job) bool { return j.Status == "done" })
	var out string
	require.NoError(t, json.Unmarshal(env.Result, &out))
	envLeases := c.jobLeases("env-1")
	require.Len(t, envLeases, 1)
	require.Contains(t, out, "CUDA_VISIBLE_DEVICES=0\n")
	require.Contains(t, out, "ORCH_JOB_ID=env-1\n")
	require.Contains(t, out, "ORCH_LEASE_TOKEN="+envLeases[0].Token+"\n")
	require.Equal(t, client.LeaseReleased, envLeases[0].Status, "completion released the lease")

	c.submitMany("gpu_sleep", []string{"rescued"}, func(int) string { return `{"ms": 4000}` }, 1)
	c.waitJob("rescued", time.Minute, func(j client.Job) bool { return j.Status == "running" })
	victim.kill()
	c.startGPUWorker("rescuer", "node-b")

	job := c.waitJob("rescued", 2*time.Minute, func(j client.Job) bool { return j.Status == "done" })
	require.Equal(t, 2, job.Attempts)
	require.Equal(t, "rescuer", job.WorkerID)
	require.JSONEq(t, `{"slept_ms":4000}`, string(job.Result))
	audit := c.auditTypes("rescued")
	for _, want := range []string{"lease.expired", "job.running->failed", "job.failed->pending"} {
		require.Contains(t, audit, want, "audit trail: %v", audit)
	}
	var ended []string
	for _, l := range c.jobLeases("rescued") {
		ended = append(ended, l.Status)
	}
	require.ElementsMatch(t, []string{client.LeaseExpired, client.LeaseReleased}, ended,
		"the victim's lease expired, the rescuer's was released with the result")
	var done int
	for _, ev := range audit {
		if ev == "job.running->done" {
			done++
		}
	}
	require.Equal(t, 1, done, "audit trail: %v", audit)
	ls := c.jobLeases("rescued")
	require.Len(t, ls, 2)
	require.Equal(t, client.LeaseExpired, ls[0].Status)
	require.Equal(t, "node-a", ls[0].NodeID)
	require.Equal(t, client.LeaseReleased, ls[1].Status)
	require.Equal(t, "node-b", ls[1].NodeID)

	var lastError string
	require.NoError(t, c.db.QueryRow(`SELECT JSON_VALUE(details, '$.error') FROM orchestrator_audit
		WHERE job_id = ? AND event_type = 'job.running->failed'`, "rescued").Scan(&lastError))
	require.Equal(t, "worker lost", lastError)
}

// TestLeaseZombieWorker: a worker paused with SIGSTOP past its lease's TTL loses the job to a
// rescuer; resumed, its late result is refused (409 lease_expired) and dropped, and the job's
// final state is the rescuer's run.
func TestLeaseZombieWorker(t *testing.T) {
	t.Parallel()
	c := newGPUCluster(t)
	c.startOrchestrator("orchestrator")
	zombie := c.startGPUWorker("zombie", "node-a")
	c.submitMany("gpu_sleep", []string{"contested"}, func(int) string { return `{"ms": 2000}` }, 1)
	c.waitJob("contested", time.Minute, func(j client.Job) bool { return j.Status == "running" })
	require.NoError(t, zombie.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = zombie.cmd.Process.Signal(syscall.SIGCONT) })

	c.startGPUWorker("rescuer", "node-b")
	c.waitJob("contested", time.Minute, func(j client.Job) bool {
		return j.Status == "running" && j.WorkerID == "rescuer"
	})
	require.NoError(t, zombie.cmd.Process.Signal(syscall.SIGCONT))
	require.Eventually(t, func() bool { return logContains(zombie, "result refused") },
		time.Minute, 50*time.Millisecond, "the zombie's late result was not refused")
	t.Logf("zombie: %s", logLine(zombie, "result refused"))

	job := c.waitJob("contested", time.Minute, func(j client.Job) bool { return j.Status == "done" })
	require.Equal(t, "rescuer", job.WorkerID)
	require.Equal(t, 2, job.Attempts)
	var doneBy string
	require.NoError(t, c.db.QueryRow(`SELECT actor FROM orchestrator_audit
		WHERE job_id = ? AND event_type = 'job.running->done'`, "contested").Scan(&doneBy))
	require.Equal(t, "worker:rescuer", doneBy, "done once, by the rescuer")
	require.Equal(t, client.LeaseExpired, c.jobLeases("contested")[0].Status)
	require.Eventually(t, func() bool { return c.pendingEntries(map[string]string{"gpu_sleep": "gpu_sleep"}) == 0 },
		30*time.Second, 50*time.Millisecond, "the zombie acked its entry")
}

// TestLeaseGrantsTwoInstances: two orchestrator processes report the same simulated node (two
// 24 GiB GPUs) and take 200 concurrent lease requests of random sizes between them (24 in
// flight at a time). After
// every grant the active reservations of each GPU are within its capacity minus the margin;
// every denial says why.
func TestLeaseGrantsTwoInstances(t *testing.T) {
	t.Parallel()
	// Admission control is off: its gates (GPU memory pressure, token buckets) refuse requests
	// of their own, with their own tests; this one is about placement.
	c := newCluster(t, shortLeases+"admission:\n  disabled: true\n")
	sim := []string{"ORCH_SIM_GPUS=2x24576", "ORCH_NODE_ID=gpu-node"}
	c.start("orchestrator-1", "orchestrator", sim, "serve")
	c.waitReady()
	addr2 := freeAddr(t)
	c.start("orchestrator-2", "orchestrator", append(sim, "ORCH_HTTP_ADDR="+addr2), "serve")
	apis := []*client.Client{c.api, client.New("http://"+addr2, c.adminToken)}
	require.Eventually(t, func() bool {
		gpus, err := apis[1].ListGPUs(context.Background(), "gpu-node")
		return err == nil && len(gpus.GPUs) == 2 && gpus.GPUs[0].Fresh && gpus.GPUs[1].Fresh
	}, time.Minute, 50*time.Millisecond, "the instances never reported their node")

	const capacity = 24576 - 512
	// The checks share a few connections: MariaDB's connection limit is shared by the
	// orchestrators of every test running in parallel.
	c.db.SetMaxOpenConns(4)
	overCommitted := func() error {
		rows, err := c.db.Query(`SELECT gpu_index, SUM(memory_mb) FROM orchestrator_leases
			WHERE node_id = 'gpu-node' AND status = 'active' GROUP BY gpu_index`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var idx, sum int64
			if err := rows.Scan(&idx, &sum); err != nil {
				return err
			}
			if sum > capacity {
				return errors.New("gpu over-committed")
			}
		}
		return rows.Err()
	}
	var (
		wg              sync.WaitGroup
		granted, denied atomic.Int64
		errs            = make(chan error, 200)
		start           = make(chan struct{})
		// At most 24 requests in flight: each holds one of its instance's MariaDB connections
		// while it waits for the node's lock, and the server's connection limit is shared
		// with the tests running in parallel. (api.TestLeaseGrantsNeverOvercommit has all 200
		// in flight at once, in process.)
		inflight = make(chan struct{}, 24)
	)
	for i := range 200 {
		wg.Go(func() {
			<-start
			inflight <- struct{}{}
			defer func() { <-inflight }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			api := apis[i%2]
			g, err := api.GrantLease(ctx, client.LeaseRequest{Agent: "e2e", MinMemoryMB: 1000 + rand.Int64N(15000), TTLSeconds: 300})
			var apiErr *client.APIError
			switch {
			case errors.As(err, &apiErr):
				denied.Add(1)
				if apiErr.StatusCode != http.StatusConflict || apiErr.Code != client.CodeNoCapacity || apiErr.Message == "" {
					errs <- err
				}
				return
			case err != nil:
				errs <- err
				return
			}
			granted.Add(1)
			if err := overCommitted(); err != nil {
				errs <- err
			}
			if i%2 == 0 {
				if _, err := api.ReleaseLease(ctx, g.Token); err != nil {
					errs <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, granted.Load())
	require.Positive(t, denied.Load())
	require.NoError(t, overCommitted())
	t.Logf("granted %d, denied %d", granted.Load(), denied.Load())
}

// logLine returns the first line of p's log that contains s.
func logLine(p *proc, s string) string {
	b, _ := os.ReadFile(p.log)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// TestLeaseSeveralGPUs: a job that asks for two GPUs of one node runs under one lease of two
// distinct GPUs of its worker's node and sees both in CUDA_VISIBLE_DEVICES; completion frees
// both. A job no GPU of the cluster could ever hold is refused at submit with 422.
func TestLeaseSeveralGPUs(t *testing.T) {
	t.Parallel()
	c := newGPUCluster(t)
	c.startOrchestrator("orchestrator")
	c.startGPUNode("pair", "node-pair", 2, 1, "gpu_sleep,gpu_env")
	ctx := context.Background()

	_, err := c.api.Submit(ctx, client.SubmitRequest{JobID: "pair-1", Type: "gpu_env", Agent: "e2e", Payload: []byte(`{}`),
		Resources: &client.Resources{GPUs: 2}})
	require.NoError(t, err)
	job := c.waitJob("pair-1", time.Minute, func(j client.Job) bool { return j.Status == "done" })
	require.Equal(t, 2, job.GPUs)
	var out string
	require.NoError(t, json.Unmarshal(job.Result, &out))
	require.Contains(t, out, "CUDA_VISIBLE_DEVICES=0,1\n", "both GPUs of the lease, in NVML's order")
	ls := c.jobLeases("pair-1")
	require.Len(t, ls, 1)
	require.Equal(t, []int{0, 1}, ls[0].GPUIndexes)
	require.Equal(t, client.LeaseReleased, ls[0].Status)
	gpus, err := c.api.ListGPUs(ctx, "node-pair")
	require.NoError(t, err)
	for _, g := range gpus.GPUs {
		require.Zero(t, g.MemoryReservedMB, "the release freed GPU %d", g.Index)
	}

	// The cluster's shape is reread every few seconds: once it holds the node, a request for
	// more memory than any GPU has is refused at submit.
	var apiErr *client.APIError
	require.Eventually(t, func() bool {
		_, err := c.api.Submit(ctx, client.SubmitRequest{Type: "gpu_env", Agent: "e2e", Payload: []byte(`{}`),
			Resources: &client.Resources{GPUMemoryMB: 1 << 20}})
		return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnprocessableEntity
	}, time.Minute, 100*time.Millisecond, "never refused as unsatisfiable")
	require.Equal(t, "unsatisfiable", apiErr.Code)
}

// TestLeaseFreedRoomUsedAtOnce: two GPU jobs that cannot share their node's one GPU run one
// after the other on one worker. The second, refused for room, is claimed again by the worker
// as soon as the first's result has released its lease, not when the reclaimer hands its
// entry on after claim_idle (a minute here): both end well within that minute.
func TestLeaseFreedRoomUsedAtOnce(t *testing.T) {
	t.Parallel()
	c := newGPUCluster(t)
	c.startOrchestrator("orchestrator")
	c.startGPUNode("one", "node-one", 1, 2, "gpu_sleep")

	c.submitMany("gpu_sleep", []string{"room-1", "room-2"}, func(int) string { return `{"ms": 1500}` }, 2)
	done := func(j client.Job) bool { return j.Status == "done" }
	a, b := c.waitJob("room-1", 40*time.Second, done), c.waitJob("room-2", 40*time.Second, done)
	if b.StartedAt.Before(*a.StartedAt) {
		a, b = b, a
	}
	require.False(t, b.StartedAt.Before(*a.FinishedAt), "16000 MB twice never fit one 24576 MB GPU at once")
	t.Logf("the second job started %s after the first ended", b.StartedAt.Sub(*a.FinishedAt))
	require.Less(t, b.StartedAt.Sub(*a.FinishedAt), 10*time.Second,
		"the second started %s after the first ended", b.StartedAt.Sub(*a.FinishedAt))
	require.Contains(t, c.auditTypes(b.JobID), "job.pending->claimed")
}

// TestLeasePriorityFirst: with the node's one GPU held, twenty GPU jobs of priority 0 and then
// one of priority 9 all wait for the scheduler to find room; when the room frees, the
// priority-9 job starts first.
func TestLeasePriorityFirst(t *testing.T) {
	t.Parallel()
	c := newGPUCluster(t)
	c.startOrchestrator("orchestrator")
	c.startGPUNode("prio", "node-prio", 1, 24, "gpu_sleep")
	ctx := context.Background()
	// The GPU is held by an agent's own lease, long enough for the setup (the cluster's leases
	// expire 3 s after their last heartbeat otherwise).
	hold, err := c.api.GrantLease(ctx, client.LeaseRequest{Agent: "e2e", NodeID: "node-prio", MinMemoryMB: 16000,
		Mode: client.LeaseModeGPU, TTLSeconds: 600})
	require.NoError(t, err)

	low := make([]string, 20)
	for i := range low {
		low[i] = fmt.Sprintf("prio-low-%02d", i)
	}
	c.submitMany("gpu_sleep", low, func(int) string { return `{"ms": 100}` }, 4)
	waiting := func(id string) bool {
		j, err := c.api.GetJob(ctx, id)
		return err == nil && j.WaitingReason != ""
	}
	require.Eventually(t, func() bool { return waiting(low[len(low)-1]) && waiting(low[0]) }, time.Minute,
		50*time.Millisecond, "the low-priority jobs were never refused for room")
	nine := 9
	_, err = c.api.Submit(ctx, client.SubmitRequest{JobID: "prio-high", Type: "gpu_sleep", Agent: "e2e",
		Payload: []byte(`{"ms": 100}`), Priority: &nine})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return waiting("prio-high") }, time.Minute, 50*time.Millisecond)
	for _, id := range low {
		require.True(t, waiting(id), "%s waits too", id)
	}

	_, err = c.api.ReleaseLease(ctx, hold.Token)
	require.NoError(t, err)
	done := func(j client.Job) bool { return j.Status == "done" }
	high := c.waitJob("prio-high", time.Minute, done)
	require.Equal(t, 9, high.Priority)
	for _, id := range low {
		j := c.waitJob(id, 2*time.Minute, done)
		require.True(t, j.StartedAt.After(*high.StartedAt), "%s started before the priority-9 job", id)
	}
}
