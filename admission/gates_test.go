package admission

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
)

// TestGPUGateWithSimulatedTelemetry drives the GPU gate end to end: a simulated node's usage is
// set, its snapshot recorded in gpu_devices by the orchestrator's own sink, and the controller's
// refresh reads it back. The clock is moved, never waited for.
func TestGPUGateWithSimulatedTelemetry(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	ctx := t.Context()
	sim, err := telemetry.NewSimulated("node-a", "2x10000")
	require.NoError(t, err)
	lm, err := leases.New(b.st, leases.Config{}, leases.Options{Now: b.clock.Now, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	report := func(pct int64) RefreshResult {
		t.Helper()
		for i := range 2 {
			require.NoError(t, sim.SetUsed(i, 100*pct))
		}
		snap, err := sim.Snapshot(ctx)
		require.NoError(t, err)
		require.NoError(t, lm.RecordSnapshot(ctx, snap))
		return b.refresh(t)
	}
	requireOpen := func() {
		t.Helper()
		requireAdmitted(t, b.job(t, "a", "gpu"), ReasonOK)
		requireAdmitted(t, b.lease(t, "a", true), ReasonOK)
	}
	requireClosed := func() {
		t.Helper()
		d := b.job(t, "a", "gpu")
		requireRejected(t, d, ReasonGPUPressure)
		require.Contains(t, d.Message, "% used")
		requireRejected(t, b.lease(t, "a", true), ReasonGPUPressure)
		// CPU work is not held back by GPU pressure.
		requireAdmitted(t, b.job(t, "a", "noop"), ReasonOK)
		requireAdmitted(t, b.lease(t, "a", false), ReasonOK)
	}

	res := report(50)
	require.InDelta(t, 0.5, res.Pressure.Ratio, 1e-9)
	require.Equal(t, 2, res.Pressure.FreshGPUs)
	requireOpen()

	res = report(95)
	require.True(t, res.GateChanged)
	requireClosed()
	d := b.job(t, "a", "gpu")
	require.Equal(t, 30*time.Second, d.RetryAfter, "the hold is what is left to wait at least")

	b.clock.Add(5 * time.Second)
	report(85)
	requireClosed()

	b.clock.Add(5 * time.Second)
	report(75)
	requireClosed() // below the low watermark, but within the hold

	b.clock.Add(25 * time.Second)
	res = report(75)
	require.True(t, res.GateChanged)
	requireOpen()

	st := b.c.Status().GPU
	require.False(t, st.Closed)
	require.Equal(t, []NodePressure{{NodeID: "node-a", UsedMB: 15000, TotalMB: 20000, Ratio: 0.75, GPUs: 2, Fresh: true}},
		st.Pressure.Nodes)

	// Telemetry that went stale is not evidence: the last fresh word stands.
	report(99)
	b.clock.Add(time.Hour)
	res = b.refresh(t)
	require.False(t, res.Pressure.Known())
	require.Equal(t, 2, res.Pressure.StaleGPUs)
	requireClosed()
	require.Positive(t, b.decisions(store.AdmissionDefaultAgent, DecisionRejected, ReasonGPUPressure))
}

// submit admits a job and, when admitted, writes it as the API would, and finishes it.
func (b *bundle) submit(t *testing.T, id, agent, typ string) Decision {
	t.Helper()
	d := b.jobID(t, id, agent, typ)
	if d.Admitted {
		b.insertJob(t, id, agent, d.Type)
		b.c.Finished(d, true)
	}
	return d
}

func TestQueueGate(t *testing.T) {
	t.Parallel()
	b := setup(t, "")

	// infer holds 2, then overflows into infer_cpu, which holds 1.
	for i := range 2 {
		d := b.submit(t, fmt.Sprintf("infer-%d", i), "a", "infer")
		requireAdmitted(t, d, ReasonOK)
		require.Equal(t, "infer", d.Type)
		require.False(t, d.Routed())
	}
	d := b.submit(t, "routed", "a", "infer")
	requireAdmitted(t, d, ReasonCPUFallback)
	require.Equal(t, "infer_cpu", d.Type)
	require.Equal(t, "infer", d.RoutedFrom)

	d = b.job(t, "a", "infer")
	requireRejected(t, d, ReasonQueueFull)
	require.Contains(t, d.Message, "infer_cpu")
	requireRejected(t, b.job(t, "a", "infer_cpu"), ReasonQueueFull)
	requireAdmitted(t, b.job(t, "a", "noop"), ReasonOK) // no queue_limit

	// The refresh counts the same backlog from the database.
	res := b.refresh(t)
	require.Equal(t, map[string]int{"infer": 2, "infer_cpu": 1}, res.Backlog)
	requireRejected(t, b.job(t, "a", "infer"), ReasonQueueFull)
	queues := b.c.Status().Queues
	require.Equal(t, []QueueState{
		{Type: "infer", Backlog: 2, Limit: 2, Full: true, CPUFallback: "infer_cpu"},
		{Type: "infer_cpu", Backlog: 1, Limit: 1, Full: true},
	}, queues)

	// Work drains the backlog: a claimed job is no longer pending.
	require.NoError(t, b.st.JobUpdate(t.Context(), store.JobUpdate{ID: "infer-0", From: store.JobPending,
		To: store.JobClaimed, Now: b.clock.Now()}))
	b.refresh(t)
	d = b.submit(t, "infer-2", "a", "infer")
	requireAdmitted(t, d, ReasonOK)
	require.Equal(t, "infer", d.Type)
}

// TestQueueGateNeverUndercounts interleaves the backlog count with submits in flight: a job
// admitted but not yet written, or written after the count began, is never lost from the
// backlog (it may be counted twice for one interval instead).
func TestQueueGateNeverUndercounts(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	backlog := func() int {
		t.Helper()
		return b.c.Status().Queues[0].Backlog
	}

	d := b.jobID(t, "j1", "a", "infer") // admitted, being written
	b.refresh(t)                        // counts 0 rows
	require.Equal(t, 1, backlog(), "in flight")
	b.insertJob(t, "j1", "a", "infer")
	b.c.Finished(d, true)
	require.Equal(t, 1, backlog(), "written since the count began")
	b.refresh(t)
	require.Equal(t, 1, backlog(), "now in the count")

	// Committed before the count, finished after it began: left out of the count (it was in
	// flight), kept locally, so counted once.
	d = b.jobID(t, "j2", "a", "infer")
	b.insertJob(t, "j2", "a", "infer")
	exclude := b.c.queues.beginCount()
	require.Equal(t, []string{"j2"}, exclude)
	b.c.Finished(d, true)
	counts, err := b.st.JobCountPending(t.Context(), []string{"infer", "infer_cpu"}, exclude)
	require.NoError(t, err)
	b.c.queues.endCount(counts, b.clock.Now())
	require.Equal(t, 2, backlog())
	b.refresh(t)
	require.Equal(t, 2, backlog())

	// A submit that wrote nothing (an existing job_id, an engine error) gives its place back.
	require.NoError(t, b.st.JobUpdate(t.Context(), store.JobUpdate{ID: "j1", From: store.JobPending, To: store.JobClaimed, Now: b.clock.Now()}))
	b.refresh(t)
	d = b.jobID(t, "jx", "a", "infer") // refused by the engine, say
	requireAdmitted(t, d, ReasonOK)
	require.Equal(t, 2, backlog())
	b.c.Finished(d, false)
	require.Equal(t, 1, backlog())

	// A repeat of the pending j2 leaves it out of a count while in flight, and keeps it.
	d = b.jobID(t, "j2", "a", "infer")
	b.refresh(t)
	require.Equal(t, 1, backlog(), "the existing j2 is left out of the count while its repeat is in flight")
	b.c.Finished(d, true)
	require.Equal(t, 1, backlog())
	b.refresh(t)
	require.Equal(t, 1, backlog())

	// A count that fails keeps what finished meanwhile.
	d = b.jobID(t, "j3", "a", "infer")
	b.c.queues.beginCount()
	b.insertJob(t, "j3", "a", "infer")
	b.c.Finished(d, true)
	b.c.queues.endCount(nil, b.clock.Now())
	require.Equal(t, 2, backlog())
}

func TestQueueGateGivesBackRefusedPlaces(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	// The queue has room, but the bucket refuses: the place taken in the queue is given back.
	b.setPolicy(t, "slow", 0.001, 1, 0)
	requireAdmitted(t, b.job(t, "slow", "infer"), ReasonOK)
	requireRejected(t, b.job(t, "slow", "infer"), ReasonRateLimited)
	requireRejected(t, b.job(t, "slow", "infer"), ReasonRateLimited)
	queues, _ := b.c.queues.state()
	require.Equal(t, 1, queues[0].Backlog)
}
