package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// TestPoolModelRouting: two pools on one host, serving models m1 and m2, two workers each,
// started by the local provisioner with a preload command configured (worker.preload). 200
// jobs for m1 and 200 for m2, submitted at once, all run, each on a worker of its model's pool
// (job rows: owner_pool and worker_id), though all four workers share the node and the job
// type. Each worker ran the preload, for its pool's model, once, and before it started its
// first job.
func TestPoolModelRouting(t *testing.T) {
	t.Parallel()
	c := newPoolCluster(t)
	marks := filepath.Join(c.dir, "preloads")
	// The preload appends "<worker> <pool> <model> <unix seconds>" to marks: argv, no payload.
	script := fmt.Sprintf(`echo "$ORCH_WORKER_ID $ORCH_POOL_ID $ORCH_MODEL_ID $(date +%%s.%%N)" >> %s`, marks)
	cfg, err := os.ReadFile(filepath.Join(c.dir, "config.yaml"))
	require.NoError(t, err)
	warm := fmt.Sprintf("  preload: warm\n  commands:\n    warm:\n      argv: [\"/bin/sh\", \"-c\", %q]\n", script)
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, "config.yaml"),
		[]byte(strings.Replace(string(cfg), "  commands:\n", warm, 1)), 0o600))
	c.startOrchestrator("orchestrator")

	ctx := context.Background()
	for _, m := range []string{"m1", "m2"} {
		_, err := c.api.CreatePool(ctx, client.PoolRequest{PoolID: "pool-" + m, AgentName: "e2e", ModelID: m,
			Types: []string{"sleep"}, DesiredWorkers: 2})
		require.NoError(t, err)
	}
	var reqs []client.SubmitRequest
	for i := range 200 {
		for _, m := range []string{"m1", "m2"} {
			reqs = append(reqs, client.SubmitRequest{JobID: fmt.Sprintf("route-%s-%03d", m, i), Type: "sleep", Agent: "e2e",
				Payload: []byte(fmt.Sprintf(`{"ms": %d}`, 1+i%5)), ModelID: m})
		}
	}
	resp, err := c.api.SubmitBatch(ctx, client.SubmitBatchRequest{Jobs: reqs})
	require.NoError(t, err)
	require.Equal(t, len(reqs), resp.Created, "%+v", resp.Results)
	if !pollUntil(3*time.Minute, func() bool { return c.statusCounts()["done"] == len(reqs) }) {
		j, _ := c.api.GetJob(ctx, "route-m1-000")
		p1, _ := c.api.GetPool(ctx, "pool-m1")
		t.Fatalf("jobs %v; route-m1-000: %+v; pool-m1: %+v", c.statusCounts(), j, p1)
	}

	// Every job ran on a worker of its model's pool.
	rows, err := c.db.Query(`SELECT model_id, owner_pool, worker_id, COUNT(*), MIN(started_at) FROM orchestrator_jobs
		WHERE job_id LIKE 'route-%' GROUP BY model_id, owner_pool, worker_id`)
	require.NoError(t, err)
	defer rows.Close()
	ran := map[string]int{}              // model → pool → jobs, as "m1 pool-m1"
	firstStart := map[string]time.Time{} // worker → its first job's start
	for rows.Next() {
		var model, pool, worker string
		var n int
		var first time.Time
		require.NoError(t, rows.Scan(&model, &pool, &worker, &n, &first))
		require.True(t, strings.HasPrefix(worker, pool+"-"), "job of pool %s run by worker %s", pool, worker)
		ran[model+" "+pool] += n
		firstStart[worker] = first
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"m1 pool-m1": 200, "m2 pool-m2": 200}, ran)

	// One preload a worker, for its pool's model, before its first job.
	raw, err := os.ReadFile(marks)
	require.NoError(t, err)
	preloaded := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 4, "preload mark %q", line)
		worker, pool, model := f[0], f[1], f[2]
		require.Equal(t, "pool-"+model, pool, "worker %s preloaded its pool's model", worker)
		preloaded[worker]++
		secs, err := strconv.ParseFloat(f[3], 64)
		require.NoError(t, err)
		at := time.Unix(0, int64(secs*1e9))
		if first, ok := firstStart[worker]; ok {
			require.True(t, at.Before(first), "worker %s preloaded at %s, after its first job started at %s", worker, at, first)
		}
	}
	for worker := range firstStart {
		require.Equal(t, 1, preloaded[worker], "worker %s ran jobs: it preloaded once (%v)", worker, preloaded)
	}
	t.Logf("jobs per pool %v; preloads per worker %v", ran, preloaded)
}
