package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// TestWorkflowsCommands: create from standard input, get, list and cancel a workflow; a bad
// one is the API's 400 (exit 2) naming the field.
func TestWorkflowsCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	doc := `{"steps":[{"name":"a","type":"noop","payload":{}},{"name":"b","type":"noop","payload":{},"needs":["a"]}]}`
	r := orchctl(t, doc, "--api-url", b.url, "--token", b.admin, "workflows", "create", "--file", "-", "--agent", "alice",
		"--workflow-id", "wf-x")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.stdout, "workflow wf-x created (running)")
	require.Contains(t, r.stdout, "wf-x.b")

	r = b.runOK(t, "workflows", "get", "wf-x", "-o", "json")
	var w client.Workflow
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &w))
	require.Equal(t, "waiting", w.Steps[1].JobStatus)
	r = b.runOK(t, "workflows", "get", "wf-x")
	require.Regexp(t, `b\s+0\s+a\s+wf-x\.b\s+waiting`, r.stdout)
	r = b.runOK(t, "workflows", "list", "--status", "running")
	require.Contains(t, r.stdout, "wf-x")
	r = b.runOK(t, "workflows", "cancel", "wf-x")
	require.Contains(t, r.stdout, "workflow wf-x cancelled")
	require.Equal(t, exitAPI, b.run(t, "workflows", "cancel", "wf-x").code, "ended already")

	r = orchctl(t, `{"steps":[{"name":"a","type":"noop","payload":{},"needs":["zz"]}]}`, "--api-url", b.url, "--token", b.admin,
		"workflows", "create", "--file", "-", "--agent", "alice")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "steps[0].needs[0]")
}
