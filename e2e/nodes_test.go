package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// TestNodesCordon: two simulated nodes whose workers are configured with different
// node_labels. GET /nodes shows both with their configured labels and the gpu.* ones their
// telemetry implies. A job runs on one node, which is then cordoned: the GPU jobs submitted
// then all run on the other (every lease of theirs is there), and the job already running on
// the cordoned node finishes there. With both nodes cordoned a job waits "cordoned: …", and
// the uncordon of the first places it there.
func TestNodesCordon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newGPUClusterWith(t, noAdmission)
	c.startOrchestrator("orchestrator")
	c.startSimNode("worker-a", "node-a", "24576", 1, "gpu_sleep", "ORCH_NODE_LABELS=zone=a,tier=prod")
	c.startSimNode("worker-b", "node-b", "24576", 1, "gpu_sleep", "ORCH_NODE_LABELS=zone=b")

	var list client.NodeList
	require.Eventually(t, func() bool {
		var err error
		list, err = c.api.ListNodes(ctx)
		return err == nil && len(list.Nodes) == 2 && list.Nodes[0].Labels["gpu.count"] != "" &&
			list.Nodes[1].Labels["gpu.count"] != ""
	}, time.Minute, 50*time.Millisecond, "both nodes listed with their telemetry's labels: %+v", list)
	auto := map[string]string{"gpu.count": "1", "gpu.memory_mb": "24576", "gpu.product": "Simulated-GPU",
		"gpu.driver": "sim", "gpu.mig": "disabled"}
	for i, want := range []map[string]string{{"zone": "a", "tier": "prod"}, {"zone": "b"}} {
		n := list.Nodes[i]
		require.Equal(t, "node-"+want["zone"], n.ID)
		require.Equal(t, "ready", n.Status)
		for k, v := range auto {
			want[k] = v
		}
		require.Equal(t, want, n.Labels, "node %s", n.ID)
		require.Len(t, n.Workers, 1)
	}

	// A long job, running when the cordon of its node comes.
	submit := func(id string, ms int) {
		t.Helper()
		_, err := c.api.Submit(ctx, client.SubmitRequest{JobID: id, Type: "gpu_sleep", Agent: "e2e",
			Payload: []byte(fmt.Sprintf(`{"ms": %d}`, ms))})
		require.NoError(t, err)
	}
	submit("long-a", 3000)
	c.waitJob("long-a", time.Minute, func(j client.Job) bool { return j.Status == "running" })
	first := c.leaseNodes("long-a")
	require.Len(t, first, 1)
	cordoned, other := first[0], "node-b"
	if cordoned == "node-b" {
		other = "node-a"
	}

	n, err := c.api.CordonNode(ctx, cordoned, "e2e maintenance")
	require.NoError(t, err)
	require.Equal(t, "cordoned", n.Status)

	// Each job takes 16000 MB of a 24576 MB GPU: one at a time per node, all on the other.
	short := ids("cordon-", 4)
	for _, id := range short {
		submit(id, 200)
	}
	for _, id := range short {
		c.waitJob(id, time.Minute, func(j client.Job) bool { return j.Status == "done" })
		require.Equal(t, []string{other}, c.leaseNodes(id), "job %s ran on the node that is not cordoned", id)
	}
	long := c.waitJob("long-a", time.Minute, func(j client.Job) bool { return j.Status == "done" })
	require.Equal(t, 1, long.Attempts, "the job running on the cordoned node finished there, in its first attempt")

	// Both cordoned: a new job waits for an uncordon, then runs on the node uncordoned.
	_, err = c.api.CordonNode(ctx, other, "")
	require.NoError(t, err)
	submit("after", 100)
	c.waitJob("after", time.Minute, func(j client.Job) bool {
		return j.Status == "pending" && strings.HasPrefix(j.WaitingReason, "cordoned:")
	})
	n, err = c.api.UncordonNode(ctx, cordoned, "")
	require.NoError(t, err)
	require.Equal(t, "ready", n.Status)
	c.waitJob("after", time.Minute, func(j client.Job) bool { return j.Status == "done" })
	require.Equal(t, []string{cordoned}, c.leaseNodes("after"))

	var audited int
	require.NoError(t, c.db.QueryRow(`SELECT COUNT(*) FROM orchestrator_audit WHERE event_type IN ('node.cordoned', 'node.uncordoned')`).Scan(&audited))
	require.Equal(t, 3, audited)
}

// leaseNodes returns the nodes of a job's leases, oldest first.
func (c *cluster) leaseNodes(jobID string) []string {
	return c.strings(`SELECT node_id FROM orchestrator_leases WHERE job_id = ? ORDER BY created_at`, jobID)
}
