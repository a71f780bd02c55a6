package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

// noopStep is a workflow step of type noop.
func noopStep(name string, needs ...string) map[string]any {
	s := map[string]any{"name": name, "type": "noop", "payload": map[string]any{}}
	if len(needs) > 0 {
		s["needs"] = needs
	}
	return s
}

// TestWorkflowsAPI: an agent submits a diamond workflow (202, then 200 for the same request),
// reads its graph with each step's job status, and cancels it (then 409); another agent sees
// none of it; phases become needs on the phase before.
func TestWorkflowsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := map[string]any{"workflow_id": "wf-1", "steps": []any{noopStep("a"), noopStep("b", "a"), noopStep("c", "a"), noopStep("d", "b", "c")}}
	rec := b.request(t, http.MethodPost, "/workflows", "alice", body)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	resp := decode[wire.WorkflowResponse](t, rec)
	require.Equal(t, wire.WorkflowResponse{WorkflowID: "wf-1", Status: "running", Created: true, Steps: []wire.WorkflowStepRef{
		{Name: "a", JobID: "wf-1.a"}, {Name: "b", JobID: "wf-1.b"}, {Name: "c", JobID: "wf-1.c"}, {Name: "d", JobID: "wf-1.d"},
	}}, resp)
	rec = b.request(t, http.MethodPost, "/workflows", "alice", body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.False(t, decode[wire.WorkflowResponse](t, rec).Created)
	body["steps"] = []any{noopStep("a")}
	requireError(t, b.request(t, http.MethodPost, "/workflows", "alice", body), http.StatusConflict, CodeIdempotencyMismatch, "steps")

	rec = b.request(t, http.MethodGet, "/workflows/wf-1", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	w := decode[wire.Workflow](t, rec)
	require.Equal(t, "alice", w.Agent)
	require.Equal(t, "running", w.Status)
	require.Equal(t, []wire.WorkflowState{
		{Name: "a", JobID: "wf-1.a", Needs: []string{}, JobStatus: "pending"},
		{Name: "b", JobID: "wf-1.b", Needs: []string{"a"}, JobStatus: "waiting"},
		{Name: "c", JobID: "wf-1.c", Needs: []string{"a"}, JobStatus: "waiting"},
		{Name: "d", JobID: "wf-1.d", Needs: []string{"b", "c"}, JobStatus: "waiting"},
	}, w.Steps)
	require.NotEmpty(t, w.Request)
	rec = b.request(t, http.MethodGet, "/jobs/wf-1.d", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "waiting", decode[wire.Job](t, rec).Status)

	requireError(t, b.request(t, http.MethodGet, "/workflows/wf-1", "bob", nil), http.StatusNotFound, CodeNotFound, "")
	requireError(t, b.request(t, http.MethodPost, "/workflows/wf-1/cancel", "bob", nil), http.StatusNotFound, CodeNotFound, "")
	requireError(t, b.request(t, http.MethodPost, "/workflows", "bob", map[string]any{"agent": "alice", "steps": []any{noopStep("a")}}),
		http.StatusForbidden, CodeForbidden, "")
	rec = b.request(t, http.MethodGet, "/workflows", "bob", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Empty(t, decode[wire.WorkflowList](t, rec).Workflows)
	rec = b.request(t, http.MethodGet, "/workflows?status=running", "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Len(t, decode[wire.WorkflowList](t, rec).Workflows, 1)

	rec = b.request(t, http.MethodPost, "/workflows/wf-1/cancel", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "cancelled", decode[wire.Workflow](t, rec).Status)
	requireError(t, b.request(t, http.MethodPost, "/workflows/wf-1/cancel", "alice", nil), http.StatusConflict, CodeConflict, "")
	rec = b.request(t, http.MethodGet, "/jobs/wf-1.a", "alice", nil)
	require.Equal(t, "cancelled", decode[wire.Job](t, rec).Status)

	phases := map[string]any{"workflow_id": "wf-2", "phases": []any{
		[]any{noopStep("drain"), noopStep("backup")},
		[]any{noopStep("upgrade")},
	}}
	rec = b.request(t, http.MethodPost, "/workflows", "admin", map[string]any{"agent": "alice", "workflow_id": "wf-2", "phases": phases["phases"]})
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	rec = b.request(t, http.MethodGet, "/workflows/wf-2", "alice", nil)
	w = decode[wire.Workflow](t, rec)
	require.Equal(t, []string{"backup", "drain"}, slices.Sorted(slices.Values(w.Steps[2].Needs)))
	require.Equal(t, 1, w.Steps[2].Phase)
}

// TestWorkflowsAPIValidation: a bad workflow is a 400 naming the field, in steps and in
// phases; a submit's depends_on likewise.
func TestWorkflowsAPIValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad := noopStep("x")
	bad["type"] = "nope"
	slow := noopStep("x")
	slow["timeout"] = "forever"
	for _, tc := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"Cycle", map[string]any{"steps": []any{noopStep("a", "b"), noopStep("b", "a")}}, "steps"},
		{"UnknownNeed", map[string]any{"steps": []any{noopStep("a"), noopStep("b", "zz")}}, "steps[1].needs[0]"},
		{"BadType", map[string]any{"steps": []any{noopStep("a"), bad}}, "steps[1].type"},
		{"BadTimeout", map[string]any{"steps": []any{slow}}, "steps[0].timeout"},
		{"BadName", map[string]any{"steps": []any{noopStep("a.b")}}, "steps[0].name"},
		{"PhaseNeeds", map[string]any{"phases": []any{[]any{noopStep("a")}, []any{noopStep("b", "a")}}}, "phases[1][0].needs"},
		{"PhaseBadType", map[string]any{"phases": []any{[]any{noopStep("a"), bad}}}, "phases[0][1].type"},
		{"EmptyPhase", map[string]any{"phases": []any{[]any{}}}, "phases[0]"},
		{"Both", map[string]any{"steps": []any{noopStep("a")}, "phases": []any{[]any{noopStep("b")}}}, "phases"},
		{"None", map[string]any{}, "steps"},
		{"BadID", map[string]any{"workflow_id": "a/b", "steps": []any{noopStep("a")}}, "workflow_id"},
		{"UnknownField", map[string]any{"steps": []any{map[string]any{"name": "a", "type": "noop", "payload": 1, "job_id": "x"}}}, "steps[0].job_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireError(t, b.request(t, http.MethodPost, "/workflows", "alice", tc.body), http.StatusBadRequest, CodeInvalidRequest, tc.field)
		})
	}
	parent := b.submitJob(t, "alice")
	other := b.submitJob(t, "bob")
	for _, tc := range []struct {
		name  string
		deps  []string
		field string
	}{
		{"Unknown", []string{parent, "nope"}, "depends_on[1]"},
		{"OtherAgents", []string{other}, "depends_on[0]"},
	} {
		t.Run("DependsOn"+tc.name, func(t *testing.T) {
			rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", map[string]any{"type": "noop", "payload": 1, "depends_on": tc.deps})
			requireError(t, rec, http.StatusBadRequest, CodeInvalidRequest, tc.field)
		})
	}
	rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", map[string]any{"type": "noop", "payload": 1, "depends_on": []string{parent}})
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	require.Equal(t, "waiting", decode[wire.SubmitResponse](t, rec).Status)
}

// TestClaimResponseParents: a claimed job's parents travel in the claim's answer.
func TestClaimResponseParents(t *testing.T) {
	t.Parallel()
	resp := wire.ClaimResponse{Claimed: []wire.ClaimedJob{{JobID: "c", Type: "noop", Payload: json.RawMessage(`{"x":1}`),
		Parents: []wire.Parent{{JobID: "p", Step: "a", Status: "done", Result: json.RawMessage(`[1,2]`)}, {JobID: "q", Status: "done", Truncated: true}}}},
		Refused: []wire.ClaimRefusal{}}
	raw, err := encodeClaimResponse(resp)
	require.NoError(t, err)
	var got wire.ClaimResponse
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, resp, got)
}
