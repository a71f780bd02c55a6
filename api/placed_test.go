package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// TestJobPlacedNode: a pending GPU job the scheduler placed shows the node (placed_node) until
// a worker there claims it; one that fits nowhere shows its waiting reason and no node.
func TestJobPlacedNode(t *testing.T) {
	t.Parallel()
	b, ck := setupClock(t)
	ctx := t.Context()
	b.reportGPUs(t, "gpu-a", 24576)
	now := ck.Now()
	require.NoError(t, b.st.WorkerUpsert(ctx, store.Worker{ID: "w-a", NodeID: "gpu-a", Types: []string{"inference"},
		Status: store.WorkerIdle, RegisteredAt: now, LastHeartbeat: now}))
	submit := func(mb int) string {
		t.Helper()
		rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", wire.SubmitRequest{Type: "inference", Payload: []byte(`{}`),
			Resources: &wire.Resources{GPUMemoryMB: mb}})
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		return decode[wire.SubmitResponse](t, rec).JobID
	}
	get := func(id string) (wire.Job, map[string]any) {
		t.Helper()
		rec := b.request(t, http.MethodGet, "/jobs/"+id, "alice", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return decode[wire.Job](t, rec), decode[map[string]any](t, rec)
	}

	fits, big := submit(20000), submit(20000)
	_, raw := get(fits)
	require.NotContains(t, raw, "placed_node", "not placed yet: absent")

	ck.Add(time.Second)
	res, err := b.eng.Schedule(ctx, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Placed, 1)
	job, _ := get(fits)
	require.Equal(t, "pending", job.Status)
	require.Equal(t, "gpu-a", job.PlacedNode)
	require.Empty(t, job.WaitingReason)
	job, raw = get(big)
	require.Empty(t, job.PlacedNode)
	require.NotContains(t, raw, "placed_node")
	require.Contains(t, job.WaitingReason, "no_capacity: needs 20000 MB on 1 GPU(s) of one node")

	claimed, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w-a", NodeID: "gpu-a", Items: []engine.ClaimItem{{JobID: fits}}})
	require.NoError(t, err)
	require.Len(t, claimed.Claimed, 1, "refused: %+v", claimed.Refused)
	job, raw = get(fits)
	require.Equal(t, "claimed", job.Status)
	require.Equal(t, "w-a", job.WorkerID)
	require.NotContains(t, raw, "placed_node", "claimed: its worker is named instead")
}

// TestJobToWirePlacedNode: only a pending job shows the node it is placed on.
func TestJobToWirePlacedNode(t *testing.T) {
	t.Parallel()
	require.Equal(t, "n1", jobToWire(store.Job{Status: store.JobPending, PlacedNode: "n1"}).PlacedNode)
	for _, s := range []store.JobStatus{store.JobClaimed, store.JobRunning, store.JobDone, store.JobCancelled} {
		require.Empty(t, jobToWire(store.Job{Status: s, PlacedNode: "n1"}).PlacedNode, s)
	}
}
