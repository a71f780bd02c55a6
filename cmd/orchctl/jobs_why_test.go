package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// TestJobsWhyScheduled: a job the scheduler placed names its node (jobs why, jobs get, the
// GPU it holds in orchctl gpus); one that did not fit says in words why, then the reason.
func TestJobsWhyScheduled(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx := t.Context()
	b.reportGPUs(t, "n1", 0)
	now := time.Now().UTC()
	require.NoError(t, b.st.WorkerUpsert(ctx, store.Worker{ID: "w-n1", NodeID: "n1", Types: []string{"noop"},
		Status: store.WorkerIdle, RegisteredAt: now, LastHeartbeat: now}))
	for _, id := range []string{"sched-placed", "sched-waits"} {
		_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: id, Type: "noop", Agent: "alice", Payload: []byte(`{}`),
			Resources: &engine.Resources{GPUMemoryMB: 20000}})
		require.NoError(t, err)
	}
	res, err := b.eng.Schedule(ctx, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Placed, 1)
	require.Equal(t, "sched-placed", res.Placed[0].JobID, "the older job first")

	r := b.runOK(t, "jobs", "why", "sched-placed")
	require.Equal(t, "sched-placed pending: placed on node n1, its GPUs reserved there: waits for a worker of type noop "+
		"on that node to claim it\n", r.stdout)
	require.Regexp(t, `(?m)^PLACED ON +n1$`, b.runOK(t, "jobs", "get", "sched-placed").stdout)
	require.Equal(t, "n1", decodeJSON[client.Job](t, b.runOK(t, "jobs", "get", "sched-placed", "-o", "json")).PlacedNode)
	require.Equal(t, "sched-placed", last(tableRows(t, b.runOK(t, "gpus").stdout)[0]), "HELD BY: the placement's lease")

	r = b.runOK(t, "jobs", "why", "sched-waits")
	require.Regexp(t, `^sched-waits pending: waits for GPU memory: no node that runs type noop has room for it now; `+
		`it is placed as soon as jobs there end \(no_capacity: needs 20000 MB on 1 GPU\(s\) of one node; the most free is \d+ MB on n1/0\)\n$`,
		r.stdout)
	require.Regexp(t, `(?m)^PLACED ON +-$`, b.runOK(t, "jobs", "get", "sched-waits").stdout)
}

// TestWhyWaitingReasons: every kind of waiting reason is explained in a sentence, the reason
// itself after it.
func TestWhyWaitingReasons(t *testing.T) {
	t.Parallel()
	g := &globals{now: time.Now}
	for reason, want := range map[string]string{
		"no_capacity: needs 30000 MB on 1 GPU(s) of one node; the most free is 20557 MB on vm/0": "waits for GPU memory: " +
			"no node that runs type gpu has room for it now",
		`reserved: node "x" is held for job y, ahead in line; elsewhere: no_capacity: needs 1 MB`: "waits its turn: " +
			"the node it would go to is held for an older job, ahead in line",
		"no_fresh_telemetry: no node that runs the job's type reports fresh telemetry of a usable GPU (2 have none fresh)": "waits for " +
			"GPU telemetry: the nodes that run type gpu have not reported their GPUs lately",
		"no_worker: no live worker of type gpu runs on a node that reports GPUs": "waits for a worker: " +
			"no live worker of type gpu runs on a node with GPUs",
		"unsatisfiable: needs 2 GPUs of one node; it waits for a node that can": "cannot be placed as the cluster is: " +
			"no node that runs type gpu could hold it even idle",
		`placement_expired: placed on node "n1", no worker there claimed it before its lease expired; another node is preferred`: "waits " +
			"to be placed again: it was placed, but no worker of that node claimed it in time",
		`quota: agent "a" holds 1 of 1 GPU(s) (max_gpus); this job needs 1`: "waits for its agent's GPU quota: " +
			"agent a holds what its admission policy allows; it is placed as soon as the agent's other GPU jobs or leases end",
		`node_unknown: node "n9" has reported no GPU`:                   "waits for a place: the node of the worker that read it could not take it",
		`telemetry_stale: the telemetry of node "n9" is 2m old`:         "waits for a place: the node of the worker that read it could not take it",
		"something_new: a kind this orchctl does not know, shown as is": "waits for a place: something_new: a kind",
	} {
		got := g.why(client.Job{Status: "pending", Type: "gpu", Agent: "a", GPUMemoryMB: 1000, WaitingReason: reason})
		require.Contains(t, got, want, reason)
		require.Contains(t, got, reason, "the reason itself is shown")
	}
}

// TestWhyFlows: a held job, a job waiting for others and a fan-out parent are each explained.
func TestWhyFlows(t *testing.T) {
	t.Parallel()
	g := &globals{now: time.Now}
	require.Contains(t, g.why(client.Job{Status: "awaiting_approval"}), "held for approval")
	require.Equal(t, "waits for the jobs it depends on to end done: a, b; one that fails cancels it, unless on_parent_failure is run",
		g.why(client.Job{Status: "waiting", DependsOn: []string{"a", "b"}}))
	require.Contains(t, g.why(client.Job{Status: "waiting", FanOutChildren: map[string]string{"n1": "fo.n1"}}),
		"a fan-out parent: it never runs itself, and ends once its children have ended (n1=fo.n1)")
}
