package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/engine"
)

func TestLeases(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.reportGPUs(t, "n1", 0, 1)
	b.reportGPUs(t, "n2", 0)

	t.Run("ListFiltersAndTable", func(t *testing.T) {
		t.Parallel()
		g := b.grant(t, "list-agent", "n2", 2048)
		r := b.runOK(t, "leases", "list", "--agent", "list-agent")
		rows := tableRows(t, r.stdout)
		require.Len(t, rows, 1, "%s", r)
		require.Equal(t, []string{g.Token, "list-agent", "-", "n2", "0", "gpu", "2.0G", "active"}, rows[0][:8])
		require.Regexp(t, `(?m)in \d+s$`, r.stdout, "the expiry is relative")

		list := decodeJSON[client.LeaseList](t, b.runOK(t, "leases", "list", "--node", "n2", "--status", "active", "-o", "json"))
		require.Len(t, list.Leases, 1)
		require.Equal(t, g.Token, list.Leases[0].Token)

		r = b.run(t, "leases", "list", "--status", "bogus")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "(field status)")
	})

	t.Run("ReleaseByToken", func(t *testing.T) {
		t.Parallel()
		g := b.grant(t, "rel-agent", "n1", 1024)
		r := b.runOK(t, "leases", "release", g.Token)
		require.Equal(t, []string{g.Token, "rel-agent", "-", "n1"}, tableRows(t, r.stdout)[0][:4], "%s", r)
		require.Equal(t, outcomeReleased, last(tableRows(t, r.stdout)[0]))

		// Again: still fine, the lease holds nothing.
		doc := decodeJSON[leaseResults](t, b.runOK(t, "leases", "release", g.Token, "-o", "json"))
		require.Len(t, doc.Results, 1)
		require.Equal(t, outcomeReleased, doc.Results[0].Outcome)
		require.Equal(t, client.LeaseReleased, doc.Results[0].Lease.Status)
	})

	t.Run("UnknownTokenExits2", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, "leases", "release", "lt_00000000000000000000000000000000")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "404 not_found")
		require.Contains(t, r.stderr, "release leases: every one of 1 failed")
	})

	t.Run("SomeFailExits6", func(t *testing.T) {
		t.Parallel()
		g := b.grant(t, "partial-agent", "n1", 1024)
		r := b.run(t, "leases", "release", g.Token, "lt_11111111111111111111111111111111", "-o", "json")
		require.Equal(t, exitPartial, r.code, "%s", r)
		doc := decodeJSON[leaseResults](t, r)
		require.Equal(t, []string{outcomeReleased, outcomeFailed}, []string{doc.Results[0].Outcome, doc.Results[1].Outcome})
		require.Contains(t, doc.Results[1].Error, "404")
		require.Contains(t, r.stderr, "release leases: 1 of 2 failed")
	})

	t.Run("JobLeaseIsRefusedByTokenSkippedByAll", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "lease-job", "job-agent")
		job := b.claim(t, id)
		require.NotEmpty(t, job.LeaseToken)
		r := b.run(t, "leases", "release", job.LeaseToken)
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "409 lease_bound_to_job")
		require.Contains(t, r.stderr, "hint: cancel its job")

		// A job without a GPU holds its lease in its own row: --all, which reads GET /leases,
		// does not see it, and the job keeps it.
		b.runOK(t, "leases", "release", "--all", "--agent", "job-agent")
		l, err := b.api.ListLeases(t.Context(), client.ListLeasesParams{JobID: id})
		require.NoError(t, err)
		require.Empty(t, l.Leases)
		got, err := b.api.GetJob(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, "claimed", string(got.Status), "the job keeps its lease")
	})

	t.Run("ReleaseAllOfOneGPU", func(t *testing.T) {
		t.Parallel()
		b.reportGPUs(t, "n3", 0, 1)
		// Best fit puts the second lease on the GPU the first one used.
		first := b.grant(t, "gpu-agent", "n3", 1024)
		second := b.grant(t, "gpu-agent", "n3", 1024)
		require.Equal(t, *first.GPUIndex, *second.GPUIndex)
		big := b.grant(t, "gpu-agent", "n3", 23000) // does not fit beside them: the other GPU
		require.NotEqual(t, *first.GPUIndex, *big.GPUIndex)

		doc := decodeJSON[leaseResults](t, b.runOK(t, "leases", "release", "--all", "--node", "n3",
			"--gpu", itoa(*first.GPUIndex), "-o", "json"))
		require.Len(t, doc.Results, 2)
		for _, res := range doc.Results {
			require.Equal(t, outcomeReleased, res.Outcome)
			require.Contains(t, []string{first.Token, second.Token}, res.Token)
		}
		l, err := b.api.ListLeases(t.Context(), client.ListLeasesParams{NodeID: "n3", Status: client.LeaseActive})
		require.NoError(t, err)
		require.Len(t, l.Leases, 1)
		require.Equal(t, big.Token, l.Leases[0].Token, "the other GPU's lease is left")

		r := b.runOK(t, "leases", "release", "--all", "--node", "n3", "--gpu", itoa(*first.GPUIndex))
		require.Empty(t, r.stdout)
		require.Contains(t, r.stderr, "no active lease matched")
	})

	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"leases", "release"},
			{"leases", "release", "--all", "lt_x"},
			{"leases", "release", "lt_x", "--agent", "a"},
			{"leases", "release", "--all", "--gpu", "1"},
			{"leases", "list", "--limit", "-1"},
		} {
			r := b.run(t, args...)
			require.Equal(t, exitUsage, r.code, "%v: %s", args, r)
			require.Contains(t, r.stderr, "Run 'orchctl leases")
		}
	})
}

func TestGPUs(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	r := b.runOK(t, "gpus")
	require.Contains(t, r.stderr, "no GPUs")

	b.reportGPUs(t, "n1", 0, 1)
	g := b.grant(t, "alice", "n1", 4096)
	r = b.runOK(t, "gpus")
	rows := tableRows(t, r.stdout)
	require.Len(t, rows, 2, "%s", r)
	leased := rows[*g.GPUIndex]
	require.Equal(t, []string{"n1", itoa(*g.GPUIndex), "SimGPU", "24.0G", "0", "4.0G"}, leased[:6], "%s", r)
	require.Equal(t, "ok", leased[len(leased)-2])
	require.Equal(t, "agent:alice", last(leased), "HELD BY: an agent's own lease")
	require.Equal(t, "-", last(rows[1-*g.GPUIndex]))

	list := decodeJSON[client.GPUList](t, b.runOK(t, "gpus", "--node", "n1", "-o", "json"))
	require.Len(t, list.GPUs, 2)
	require.EqualValues(t, 4096, list.GPUs[*g.GPUIndex].MemoryReservedMB)
	require.Equal(t, 1, list.GPUs[*g.GPUIndex].ActiveLeases)
	require.True(t, list.GPUs[0].Fresh)

	list = decodeJSON[client.GPUList](t, b.runOK(t, "gpus", "--node", "nowhere", "-o", "json"))
	require.Empty(t, list.GPUs)

	// A job of two GPUs is held on both.
	_, _, err := b.eng.Submit(t.Context(), engine.SubmitParams{JobID: "pair", Type: "noop", Agent: "alice",
		Payload: []byte(`{}`), Resources: &engine.Resources{GPUMemoryMB: 1000, GPUs: 2}})
	require.NoError(t, err)
	res, err := b.eng.Claim(t.Context(), engine.ClaimParams{WorkerID: "w1", NodeID: "n1", Items: []engine.ClaimItem{{JobID: "pair"}}})
	require.NoError(t, err)
	require.Len(t, res.Claimed, 1, "refused: %+v", res.Refused)
	rows = tableRows(t, b.runOK(t, "gpus").stdout)
	require.Equal(t, "pair", last(rows[1-*g.GPUIndex]))
	held := rows[*g.GPUIndex]
	require.Equal(t, []string{"agent:alice,", "pair"}, held[len(held)-2:], "oldest first: %v", rows)
}

// TestLeaseLimitsMatchTheAPI keeps orchctl's copy of the API's page sizes right.
func TestLeaseLimitsMatchTheAPI(t *testing.T) {
	t.Parallel()
	require.Equal(t, api.LeaseListLimitDefault, leaseListLimitDefault)
	require.Equal(t, api.LeaseListLimitMax, leaseListLimitMax)
}

// last returns the last cell of a table row.
func last(row []string) string { return row[len(row)-1] }
