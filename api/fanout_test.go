package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// TestFanOutAPI: a submit with fan_out answers with the parent (waiting), which GET /jobs/{id}
// shows with its children by node; a child shows what it waits for; a bad fan_out is a 400 or
// a 422 naming the field, in a submit and in a workflow step.
func TestFanOutAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, now := context.Background(), time.Now()
	for _, n := range []string{"n1", "n2"} {
		require.NoError(t, b.st.NodeUpsert(ctx, n, map[string]string{"zone": "a"}, now))
		require.NoError(t, b.st.WorkerUpsert(ctx, store.Worker{ID: "w-" + n, NodeID: n, Types: []string{"noop"},
			Status: store.WorkerIdle, Concurrency: 1, RegisteredAt: now, LastHeartbeat: now}))
	}
	rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", map[string]any{"job_id": "fo", "type": "noop", "payload": 1,
		"fan_out": map[string]any{"all": true, "strategy": "continue"}})
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	require.Equal(t, "waiting", decode[wire.SubmitResponse](t, rec).Status)
	rec = b.request(t, http.MethodGet, "/jobs/fo", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, map[string]string{"n1": "fo.n1", "n2": "fo.n2"}, decode[wire.Job](t, rec).FanOutChildren)
	rec = b.request(t, http.MethodGet, "/jobs/fo.n2", "alice", nil)
	child := decode[wire.Job](t, rec)
	require.Equal(t, "pending", child.Status)
	require.Equal(t, []string{"n2"}, child.Constraints.AllowNodes)

	rec = b.request(t, http.MethodPost, "/jobs/submit", "alice", map[string]any{"job_id": "after", "type": "noop", "payload": 1,
		"depends_on": []string{"fo"}})
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	rec = b.request(t, http.MethodGet, "/jobs/after", "alice", nil)
	require.Equal(t, []string{"fo"}, decode[wire.Job](t, rec).DependsOn)

	for _, tc := range []struct {
		name   string
		fanOut map[string]any
		status int
		code   string
		field  string
	}{
		{"TwoModes", map[string]any{"all": true, "nodes": []string{"n1"}}, http.StatusBadRequest, CodeInvalidRequest, "fan_out"},
		{"Strategy", map[string]any{"all": true, "strategy": "maybe"}, http.StatusBadRequest, CodeInvalidRequest, "fan_out.strategy"},
		{"UnknownNode", map[string]any{"nodes": []string{"n1", "n9"}}, http.StatusUnprocessableEntity, CodeUnsatisfiable, "fan_out.nodes[1]"},
		{"NoneMatch", map[string]any{"node_selector": map[string]string{"zone": "b"}}, http.StatusUnprocessableEntity, CodeUnsatisfiable, "fan_out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", map[string]any{"type": "noop", "payload": 1, "fan_out": tc.fanOut})
			requireError(t, rec, tc.status, tc.code, tc.field)
			rec = b.request(t, http.MethodPost, "/workflows", "alice", map[string]any{"steps": []any{
				map[string]any{"name": "a", "type": "noop", "payload": 1, "fan_out": tc.fanOut}}})
			requireError(t, rec, tc.status, tc.code, "steps[0]."+tc.field)
		})
	}
}
