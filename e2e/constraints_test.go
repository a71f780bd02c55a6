package e2e

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// TestScheduleConstraints: two simulated nodes whose workers are configured with different
// node_labels, and 100 GPU jobs submitted at once: 30 with node_selector {tier: prod}, 30
// denying the prod node, 40 of one agent with max_per_node 2; and 20 jobs that need no GPU,
// denying the prod node. Read from the lease rows that ran them: every selected job ran on the
// prod node, every denying one elsewhere, and replayed in the order the transactions wrote,
// no node ever held more than two of the max_per_node agent's jobs at once, while both nodes
// ran them.
func TestScheduleConstraints(t *testing.T) {
	t.Parallel()
	c := newGPUClusterWith(t, noAdmission)
	c.startOrchestrator("orchestrator")
	// Eight slots and two 24 GiB GPUs a node: room for three 7000 MB jobs on each GPU.
	c.startSimNode("worker-prod", "prod-node", "2x24576", 8, "gpu_sleep,sleep", "ORCH_NODE_LABELS=tier=prod,zone=a")
	c.startSimNode("worker-dev", "dev-node", "2x24576", 8, "gpu_sleep,sleep", "ORCH_NODE_LABELS=tier=dev,zone=a")

	var reqs []client.SubmitRequest
	add := func(prefix, agent string, n int, cons client.Constraints) {
		for i := range n {
			req := client.SubmitRequest{JobID: fmt.Sprintf("%s-%02d", prefix, i), Type: "gpu_sleep", Agent: agent,
				Payload: []byte(fmt.Sprintf(`{"ms": %d}`, 100+10*(i%5))), Resources: &client.Resources{GPUMemoryMB: 7000},
				Constraints: &cons}
			if prefix == "cpu" {
				req.Type, req.Resources = "sleep", nil
			}
			reqs = append(reqs, req)
		}
	}
	add("sel", "e2e", 30, client.Constraints{NodeSelector: map[string]string{"tier": "prod"}})
	add("deny", "e2e", 30, client.Constraints{DenyNodes: []string{"prod-node"}})
	add("per", "spread", 40, client.Constraints{MaxPerNode: 2})
	add("cpu", "e2e", 20, client.Constraints{DenyNodes: []string{"prod-node"}}) // no GPU: placed by worker slots
	resp, err := c.api.SubmitBatch(context.Background(), client.SubmitBatchRequest{Jobs: reqs})
	require.NoError(t, err)
	require.Equal(t, len(reqs), resp.Created, "%+v", resp.Results)
	c.waitStatus("done", len(reqs), 3*time.Minute)

	job, err := c.api.GetJob(context.Background(), "sel-00")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"tier": "prod"}, job.Constraints.NodeSelector)

	ls := c.requireNoOverCommit()
	ranOn := map[string]string{} // job → node of the lease it ran under
	for _, l := range ls {
		if l.Status == client.LeaseReleased {
			require.NotContains(t, ranOn, l.JobID, "job %s ran twice", l.JobID)
			ranOn[l.JobID] = l.Node
		}
	}
	// The jobs that need no GPU ran under leases of their node only.
	rows, err := c.db.Query(`SELECT job_id, node_id FROM orchestrator_leases WHERE mode = 'cpu' AND status = 'released'
		AND job_id LIKE 'cpu-%'`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id, node string
		require.NoError(t, rows.Scan(&id, &node))
		require.NotContains(t, ranOn, id, "job %s ran twice", id)
		ranOn[id] = node
	}
	require.NoError(t, rows.Err())
	require.Len(t, ranOn, len(reqs))
	nodesOf := map[string]map[string]int{} // prefix → node → jobs
	for id, node := range ranOn {
		prefix := id[:len(id)-3]
		if nodesOf[prefix] == nil {
			nodesOf[prefix] = map[string]int{}
		}
		nodesOf[prefix][node]++
	}
	require.Equal(t, map[string]int{"prod-node": 30}, nodesOf["sel"], "node_selector tier=prod")
	require.Equal(t, map[string]int{"dev-node": 30}, nodesOf["deny"], "deny_nodes prod-node")
	require.Len(t, nodesOf["per"], 2, "max_per_node 2 spreads agent spread's jobs: %v", nodesOf["per"])
	require.Equal(t, map[string]int{"dev-node": 20}, nodesOf["cpu"], "deny_nodes prod-node, a job that needs no GPU")

	// max_per_node, replayed: every lease of agent spread's jobs (placements that expired
	// too), from the audit row that began it to the one that ended it.
	type event struct {
		at    int64
		delta int
	}
	byNode := map[string][]event{}
	for _, l := range ls {
		if !strings.HasPrefix(l.JobID, "per-") {
			continue
		}
		start, end := byAuditOrder(&l)
		byNode[l.Node] = append(byNode[l.Node], event{start, 1}, event{end, -1})
	}
	for node, evs := range byNode {
		slices.SortFunc(evs, func(a, b event) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
		held, peak := 0, 0
		for _, ev := range evs {
			held += ev.delta
			peak = max(peak, held)
		}
		t.Logf("node %s: agent spread held at most %d jobs at once", node, peak)
		require.LessOrEqual(t, peak, 2, "node %s held more than max_per_node of agent spread's jobs", node)
	}
}
