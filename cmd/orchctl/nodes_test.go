package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestNodes(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	_, err := b.api.RegisterWorker(t.Context(), client.RegisterWorkerRequest{WorkerID: "w1", NodeID: "n1",
		Types: []string{"noop"}, Concurrency: 1, NodeLabels: map[string]string{"zone": "a"}})
	require.NoError(t, err)
	b.reportGPUs(t, "n1", 0, 1)
	b.grant(t, "alice", "n1", 1000)

	r := b.runOK(t, "nodes", "list")
	rows := tableRows(t, r.stdout)
	require.Len(t, rows, 1, "%s", r)
	require.Equal(t, []string{"n1", "ready", "2"}, rows[0][:3], "%s", r)
	require.Equal(t, []string{"1", "1"}, rows[0][4:6], "one live worker, one lease: %s", r)
	require.Contains(t, rows[0][6], "gpu.count=2", "%s", r)
	require.Contains(t, r.stdout, "zone=a")
	list := decodeJSON[client.NodeList](t, b.runOK(t, "nodes", "list", "-o", "json"))
	require.Equal(t, "a", list.Nodes[0].Labels["zone"])

	r = b.runOK(t, "nodes", "show", "n1")
	require.Regexp(t, `(?m)^STATUS\s+ready$`, r.stdout)
	require.Regexp(t, `(?m)^w1\s+-\s+idle\s+noop$`, r.stdout)
	require.Regexp(t, `(?m)^n1\s+0\s+SimGPU\s`, r.stdout, "the GPUs as orchctl gpus shows them")
	require.Regexp(t, `(?m)^lt_\w+\s+alice\s+-\s+gpu\s`, r.stdout)

	r = b.runOK(t, "nodes", "cordon", "n1", "--reason", "swap a fan")
	require.Equal(t, "cordoned", tableRows(t, r.stdout)[0][1], "%s", r)
	n := decodeJSON[client.Node](t, b.runOK(t, "nodes", "show", "n1", "-o", "json"))
	require.True(t, n.Cordoned)
	require.Equal(t, "swap a fan", n.CordonReason)
	r = b.runOK(t, "nodes", "show", "n1")
	require.Regexp(t, `(?m)^CORDON REASON\s+swap a fan$`, r.stdout)

	r = b.runOK(t, "nodes", "uncordon", "n1")
	require.Equal(t, "ready", tableRows(t, r.stdout)[0][1], "%s", r)

	r = orchctl(t, "", "--api-url", b.url, "--token", b.alice, "nodes", "cordon", "n1")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "403")
	r = b.run(t, "nodes", "cordon", "nope")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "404 not_found")

	r = b.runOK(t, "__complete", "nodes", "cordon", "")
	require.Contains(t, r.stdout, "n1\n")
}
