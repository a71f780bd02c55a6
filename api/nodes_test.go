package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/nodes"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/wire"
)

// TestNodesAPI, on MariaDB and on SQLite: GET /nodes and /nodes/{id} show each node with its
// labels, status, GPUs, workers and leases; cordon and uncordon are admin-only, audited, 404
// for an unknown node and 400 naming reason when it is too long.
func TestNodesAPI(t *testing.T) {
	t.Parallel()
	for name, setup := range map[string]func(testing.TB) *bundle{"MariaDB": setup, "SQLite": setupSQLiteAPI} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testNodesAPI(t, setup(t))
		})
	}
}

func testNodesAPI(t *testing.T, b *bundle) {
	ctx := context.Background()
	now := time.Now().UTC()
	// Node "gpu-a": a worker with configured labels and simulated GPUs; "old": a worker that
	// went offline long ago and no telemetry.
	require.NoError(t, b.st.WorkerUpsert(ctx, store.Worker{ID: "w-a", NodeID: "gpu-a", PoolID: "p", Types: []string{"noop"},
		Status: store.WorkerIdle, RegisteredAt: now, LastHeartbeat: now}))
	require.NoError(t, b.st.NodeUpsert(ctx, "gpu-a", map[string]string{"zone": "a"}, now))
	sim, err := telemetry.NewSimulated("gpu-a", "2x24576")
	require.NoError(t, err)
	snap, err := sim.Snapshot(ctx)
	require.NoError(t, err)
	require.NoError(t, b.lm.RecordSnapshot(ctx, snap))
	lease, err := b.lm.Grant(ctx, leases.GrantParams{Agent: "alice", NodeID: "gpu-a", Mode: store.LeaseGPU, MemoryMB: 1000, Actor: "agent:alice"})
	require.NoError(t, err)
	require.NoError(t, b.st.WorkerUpsert(ctx, store.Worker{ID: "w-gone", NodeID: "old", Types: []string{"noop"},
		Status: store.WorkerOffline, RegisteredAt: now, LastHeartbeat: now}))

	rec := b.request(t, http.MethodGet, "/nodes", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	list := decode[wire.NodeList](t, rec)
	require.Len(t, list.Nodes, 2)
	a, gone := list.Nodes[0], list.Nodes[1]
	require.Equal(t, "gpu-a", a.ID)
	require.Equal(t, nodes.StatusReady, a.Status)
	require.Equal(t, "a", a.Labels["zone"])
	require.Equal(t, "2", a.Labels["gpu.count"])
	require.Equal(t, "sim", a.Labels["gpu.driver"])
	require.Len(t, a.GPUs, 2)
	require.Equal(t, []wire.NodeWorker{{WorkerID: "w-a", PoolID: "p", Status: "idle", Types: []string{"noop"}}}, a.Workers)
	require.Equal(t, 1, a.ActiveLeases)
	require.Equal(t, lease.Token, a.Leases[0].LeaseToken, "alice's own lease shows its token")
	require.NotNil(t, a.LastSeen)
	require.Equal(t, "old", gone.ID)
	require.Equal(t, nodes.StatusOffline, gone.Status)
	require.Nil(t, gone.LastSeen, "named by a worker only, not recorded yet")

	rec = b.request(t, http.MethodGet, "/nodes/gpu-a", "bob", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	other := decode[wire.Node](t, rec).Leases[0]
	require.Empty(t, other.LeaseToken, "another agent's lease token is a capability it may not see")
	require.Empty(t, other.Agent, "nor whose the lease is")
	require.Equal(t, int64(1000), other.MemoryMB, "the room it takes is shown")

	for _, tc := range []struct {
		name, method, path, who string
		body                    any
		status                  int
		field                   string
	}{
		{"AgentCannotCordon", http.MethodPost, "/nodes/gpu-a/cordon", "alice", nil, http.StatusForbidden, ""},
		{"WorkerCannotCordon", http.MethodPost, "/nodes/gpu-a/cordon", "worker", nil, http.StatusForbidden, ""},
		{"UnknownNodeGet", http.MethodGet, "/nodes/nope", "admin", nil, http.StatusNotFound, ""},
		{"UnknownNodeCordon", http.MethodPost, "/nodes/nope/cordon", "admin", nil, http.StatusNotFound, ""},
		{"UnknownNodeUncordon", http.MethodPost, "/nodes/nope/uncordon", "admin", nil, http.StatusNotFound, ""},
		{"ReasonTooLong", http.MethodPost, "/nodes/gpu-a/cordon", "admin",
			wire.CordonRequest{Reason: strings.Repeat("r", nodes.ReasonMax+1)}, http.StatusBadRequest, "reason"},
		{"UnknownField", http.MethodPost, "/nodes/gpu-a/cordon", "admin", `{"why": "x"}`, http.StatusBadRequest, "why"},
	} {
		rec := b.request(t, tc.method, tc.path, tc.who, tc.body)
		require.Equal(t, tc.status, rec.Code, "%s: %s", tc.name, rec.Body.String())
		if tc.field != "" {
			require.Equal(t, tc.field, decode[wire.ErrorBody](t, rec).Error.Field, tc.name)
		}
	}

	// Cordon, with a reason; the node named only by a worker can be cordoned too.
	rec = b.request(t, http.MethodPost, "/nodes/gpu-a/cordon", "admin", wire.CordonRequest{Reason: "swap disk"})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	got := decode[wire.Node](t, rec)
	require.Equal(t, nodes.StatusCordoned, got.Status)
	require.True(t, got.Cordoned)
	require.Equal(t, "swap disk", got.CordonReason)
	require.True(t, strings.HasPrefix(got.CordonedBy, "admin:"), got.CordonedBy)
	require.NotNil(t, got.CordonedAt)
	rec = b.request(t, http.MethodPost, "/nodes/old/cordon", "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, nodes.StatusCordoned, decode[wire.Node](t, rec).Status)

	rec = b.request(t, http.MethodPost, "/nodes/gpu-a/uncordon", "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	got = decode[wire.Node](t, rec)
	require.Equal(t, nodes.StatusReady, got.Status)
	require.Nil(t, got.CordonedAt)

	// Every change is audited with its actor and reason.
	events, err := b.st.AuditList(ctx, store.AuditListParams{Limit: 1000})
	require.NoError(t, err)
	var audited []string
	for _, ev := range events {
		if strings.HasPrefix(ev.EventType, "node.") {
			require.True(t, strings.HasPrefix(ev.Actor, "admin:"), ev.Actor)
			audited = append(audited, ev.EventType+" "+string(ev.Details))
		}
	}
	require.Len(t, audited, 3)
	require.Contains(t, audited[0], nodes.EventCordoned)
	require.Contains(t, audited[0], `"reason":"swap disk"`)
	require.Contains(t, audited[0], `"node_id":"gpu-a"`)
	require.Contains(t, audited[1], `"node_id":"old"`)
	require.Contains(t, audited[2], nodes.EventUncordoned)
}
