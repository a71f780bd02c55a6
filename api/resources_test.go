package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

// TestSubmitResources: a submit's resources override its type's, are checked field by field
// (400 naming the field), and a request that no node of the cluster could ever place is
// refused 422 unsatisfiable, naming what it needs and the most there is.
func TestSubmitResources(t *testing.T) {
	t.Parallel()
	b, ck := setupClock(t)
	b.cfg.JobTypes["inference"].GPUMemoryMB = 8000
	post := func(typ string, r *wire.Resources) *httptest.ResponseRecorder {
		return b.request(t, http.MethodPost, "/jobs/submit", "alice", wire.SubmitRequest{Type: typ, Payload: []byte(`{}`), Resources: r})
	}

	t.Run("Invalid", func(t *testing.T) {
		requireError(t, post("inference", &wire.Resources{GPUs: 9}), http.StatusBadRequest, CodeInvalidRequest, "resources.gpus")
		requireError(t, post("inference", &wire.Resources{GPUs: -1}), http.StatusBadRequest, CodeInvalidRequest, "resources.gpus")
		requireError(t, post("inference", &wire.Resources{GPUMemoryMB: -5}), http.StatusBadRequest, CodeInvalidRequest,
			"resources.gpu_memory_mb")
		d := requireError(t, post("noop", &wire.Resources{GPUs: 2}), http.StatusBadRequest, CodeInvalidRequest,
			"resources.gpu_memory_mb")
		require.Contains(t, d.Message, `type "noop" needs no GPU`)
	})

	t.Run("NoGPUKnownYet", func(t *testing.T) {
		// Before any node reported, nothing is known to be impossible: the job waits.
		rec := post("inference", &wire.Resources{GPUMemoryMB: 1 << 20, GPUs: 8})
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	})

	b.reportGPUs(t, "node-a", 81920, 81920)
	b.reportGPUs(t, "node-b", 24576, 24576, 24576, 24576)
	ck.Add(time.Minute) // past the reuse of the cluster's shape read before: it is read again

	t.Run("Unsatisfiable", func(t *testing.T) {
		d := requireError(t, post("inference", &wire.Resources{GPUMemoryMB: 90000}), http.StatusUnprocessableEntity,
			CodeUnsatisfiable, "resources")
		require.Contains(t, d.Message, `needs 90000 MB on a GPU; the largest GPU of the cluster can grant 81408 MB (node "node-a"`)
		d = requireError(t, post("inference", &wire.Resources{GPUMemoryMB: 30000, GPUs: 3}), http.StatusUnprocessableEntity,
			CodeUnsatisfiable, "resources")
		require.Contains(t, d.Message, `needs 3 GPUs of one node with 30000 MB each; the most any node has is 2 (node "node-a")`)
		d = requireError(t, post("inference", &wire.Resources{GPUs: 5}), http.StatusUnprocessableEntity, CodeUnsatisfiable, "resources")
		require.Contains(t, d.Message, "the most any node has is 4")
	})

	t.Run("Satisfiable", func(t *testing.T) {
		rec := post("inference", &wire.Resources{GPUMemoryMB: 20000, GPUs: 4, Exclusive: true})
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+decode[wire.SubmitResponse](t, rec).JobID, "alice", nil))
		require.Equal(t, 20000, job.GPUMemoryMB)
		require.Equal(t, 4, job.GPUs)
		require.True(t, job.GPUExclusive)

		rec = post("inference", nil)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		job = decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+decode[wire.SubmitResponse](t, rec).JobID, "alice", nil))
		require.Equal(t, 8000, job.GPUMemoryMB, "the type's default")
		require.Equal(t, 1, job.GPUs)
		require.False(t, job.GPUExclusive)
	})

	t.Run("ResubmitComparesResources", func(t *testing.T) {
		req := wire.SubmitRequest{JobID: "res-1", Type: "inference", Payload: []byte(`{}`), Resources: &wire.Resources{GPUs: 2}}
		rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", req)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		require.Equal(t, http.StatusOK, b.request(t, http.MethodPost, "/jobs/submit", "alice", req).Code)
		req.Resources.GPUs = 1
		requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "alice", req), http.StatusConflict,
			CodeIdempotencyMismatch, "resources")
	})
}

// TestSubmitPriority: a submit's priority is 0..9 (400 naming the field otherwise), its type's
// when absent, shown on the job, and compared when the job_id is submitted again.
func TestSubmitPriority(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.JobTypes["sleep"].Priority = 4
	ten, three := 10, 3
	requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "alice",
		wire.SubmitRequest{Type: "noop", Payload: []byte(`{}`), Priority: &ten}), http.StatusBadRequest, CodeInvalidRequest, "priority")
	rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", wire.SubmitRequest{Type: "sleep", Payload: []byte(`{"ms":1}`)})
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+decode[wire.SubmitResponse](t, rec).JobID, "alice", nil))
	require.Equal(t, 4, job.Priority, "the type's")

	req := wire.SubmitRequest{JobID: "prio-1", Type: "sleep", Payload: []byte(`{"ms":1}`), Priority: &three}
	require.Equal(t, http.StatusAccepted, b.request(t, http.MethodPost, "/jobs/submit", "alice", req).Code)
	require.Equal(t, 3, decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/prio-1", "alice", nil)).Priority)
	req.Priority = new(int) // 0: another priority than the first submit's
	requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "alice", req), http.StatusConflict, CodeIdempotencyMismatch, "priority")
}
