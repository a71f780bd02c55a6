package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

// TestSubmitConstraints: a job's constraints are checked field by field (400 naming the field),
// kept sorted and shown on the job; a job that no registered node could ever take, by its
// constraints or by its resources on the nodes that pass them, is refused 422 unsatisfiable.
func TestSubmitConstraints(t *testing.T) {
	t.Parallel()
	b, ck := setupClock(t)
	b.cfg.JobTypes["inference"].GPUMemoryMB = 8000
	post := func(typ string, c *wire.Constraints, r *wire.Resources) *httptest.ResponseRecorder {
		return b.request(t, http.MethodPost, "/jobs/submit", "alice", wire.SubmitRequest{Type: typ, Payload: []byte(`{}`),
			Constraints: c, Resources: r})
	}

	t.Run("Invalid", func(t *testing.T) {
		for field, c := range map[string]*wire.Constraints{
			"constraints.node_selector":      {NodeSelector: map[string]string{"bad key": "x"}},
			"constraints.node_selector.zone": {NodeSelector: map[string]string{"zone": "a b"}},
			"constraints.allow_nodes[1]":     {AllowNodes: []string{"ok", "../etc"}},
			"constraints.deny_nodes":         {AllowNodes: []string{"a"}, DenyNodes: []string{"a"}},
			"constraints.max_per_node":       {MaxPerNode: -1},
			"constraints.deny_nodes[0]":      {DenyNodes: []string{strings.Repeat("n", 129)}},
		} {
			requireError(t, post("inference", c, nil), http.StatusBadRequest, CodeInvalidRequest, field)
		}
		many := make([]string, 65)
		for i := range many {
			many[i] = "n" + strings.Repeat("x", i)
		}
		requireError(t, post("inference", &wire.Constraints{AllowNodes: many}, nil), http.StatusBadRequest, CodeInvalidRequest,
			"constraints.allow_nodes")
		requireError(t, post("inference", &wire.Constraints{MaxPerNode: 1001}, nil), http.StatusBadRequest, CodeInvalidRequest,
			"constraints.max_per_node")
	})

	t.Run("NoNodeKnownYet", func(t *testing.T) {
		rec := post("inference", &wire.Constraints{NodeSelector: map[string]string{"tier": "prod"}}, nil)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	})

	ctx := context.Background()
	b.reportGPUs(t, "node-a", 81920, 81920)
	b.reportGPUs(t, "node-b", 24576)
	require.NoError(t, b.st.NodeUpsert(ctx, "node-a", map[string]string{"tier": "prod"}, ck.Now()))
	require.NoError(t, b.st.NodeUpsert(ctx, "node-b", map[string]string{"tier": "dev"}, ck.Now()))
	ck.Add(time.Minute) // past the reuse of the nodes read before: they are read again

	t.Run("Unsatisfiable", func(t *testing.T) {
		d := requireError(t, post("inference", &wire.Constraints{NodeSelector: map[string]string{"tier": "staging"}}, nil),
			http.StatusUnprocessableEntity, CodeUnsatisfiable, "constraints")
		require.Contains(t, d.Message, "node-a (node_selector), node-b (node_selector)")
		d = requireError(t, post("inference", &wire.Constraints{DenyNodes: []string{"node-a", "node-b"}}, nil),
			http.StatusUnprocessableEntity, CodeUnsatisfiable, "constraints")
		require.Contains(t, d.Message, "node-a (deny_nodes)")
		// A job that needs no GPU is placed by its constraints too.
		requireError(t, post("noop", &wire.Constraints{NodeSelector: map[string]string{"tier": "staging"}}, nil),
			http.StatusUnprocessableEntity, CodeUnsatisfiable, "constraints")
		rec := post("noop", &wire.Constraints{NodeSelector: map[string]string{"tier": "dev"}}, nil)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		// node-b passes, but its one GPU cannot hold 30000 MB.
		d = requireError(t, post("inference", &wire.Constraints{NodeSelector: map[string]string{"tier": "dev"}},
			&wire.Resources{GPUMemoryMB: 30000}), http.StatusUnprocessableEntity, CodeUnsatisfiable, "resources")
		require.Contains(t, d.Message, "among the 1 node(s) that pass the constraints")
	})

	t.Run("Kept", func(t *testing.T) {
		c := &wire.Constraints{NodeSelector: map[string]string{"tier": "prod"}, AllowNodes: []string{"node-b", "node-a", "node-a"},
			MaxPerNode: 2}
		rec := post("inference", c, nil)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+decode[wire.SubmitResponse](t, rec).JobID, "alice", nil))
		require.Equal(t, &wire.Constraints{NodeSelector: map[string]string{"tier": "prod"}, AllowNodes: []string{"node-a", "node-b"},
			MaxPerNode: 2}, job.Constraints, "sorted, without duplicates")
	})

	t.Run("ResubmitComparesConstraints", func(t *testing.T) {
		req := wire.SubmitRequest{JobID: "con-1", Type: "inference", Payload: []byte(`{}`),
			Constraints: &wire.Constraints{AllowNodes: []string{"node-a"}}}
		require.Equal(t, http.StatusAccepted, b.request(t, http.MethodPost, "/jobs/submit", "alice", req).Code)
		require.Equal(t, http.StatusOK, b.request(t, http.MethodPost, "/jobs/submit", "alice", req).Code)
		req.Constraints.AllowNodes = []string{"node-b"}
		requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "alice", req), http.StatusConflict,
			CodeIdempotencyMismatch, "constraints")
	})
}
