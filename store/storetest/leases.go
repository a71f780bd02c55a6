package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testLeases runs the conformance tests of orchestrator_leases and gpu_devices, each on its
// own rows (tokens and node ids carry the subtest's prefix).
func testLeases(t *testing.T, parent *bundle) {
	runAll(t, parent.s, []subtest{
		{"InsertAndGet", testLeaseInsertAndGet},
		{"SetStatus", testLeaseSetStatus},
		{"Heartbeat", testLeaseHeartbeat},
		{"ListAndExpired", testLeaseListAndExpired},
		{"GPUSnapshotAndCapacity", testGPUSnapshotAndCapacity},
		{"MultiGPULease", testMultiGPULease},
		{"Holdings", testLeaseHoldings},
		{"InJobRows", testJobLeases},
	})
}

// lease returns an active lease of the subtest's node, expiring a minute after b.now.
func (b *bundle) lease(name string, gpu *int, memMB int64) store.Lease {
	mode := store.LeaseCPU
	var gpus []int
	if gpu != nil {
		mode, gpus = store.LeaseGPU, []int{*gpu}
	}
	return store.Lease{
		Token: b.prefix + name, Agent: b.agent(), NodeID: b.prefix + "node", GPUIndex: gpu, GPUIndexes: gpus,
		Mode: mode, MemoryMB: memMB, TTL: time.Minute, Status: store.LeaseActive,
		CreatedAt: b.now, ExpiresAt: b.now.Add(time.Minute), LastHeartbeat: b.now,
	}
}

func intp(i int) *int { return &i }

// ofSubtest keeps the leases of this subtest (the database is shared).
func (b *bundle) ofSubtest(leases []store.Lease) []store.Lease {
	var out []store.Lease
	for _, l := range leases {
		if strings.HasPrefix(l.Token, b.prefix) {
			out = append(out, l)
		}
	}
	return out
}

func testLeaseInsertAndGet(t *testing.T, b *bundle) {
	ctx := t.Context()
	gpu := b.lease("gpu", intp(1), 8192)
	gpu.JobID = b.id("job")
	gpu.Exclusive = true
	gpu.TTL = 1500 * time.Millisecond
	gpu.Metadata = json.RawMessage(`{"worker_id": "w1"}`)
	cpu := b.lease("cpu", nil, 0)
	require.NoError(t, b.s.LeaseInsert(ctx, []store.Lease{gpu, cpu}))

	got, err := b.s.LeaseGet(ctx, gpu.Token, false)
	require.NoError(t, err)
	requireTime(t, gpu.CreatedAt, got.CreatedAt, "created_at")
	requireTime(t, gpu.ExpiresAt, got.ExpiresAt, "expires_at")
	requireTime(t, gpu.LastHeartbeat, got.LastHeartbeat, "last_heartbeat")
	require.Nil(t, got.EndedAt)
	require.JSONEq(t, string(gpu.Metadata), string(got.Metadata))
	gpu.CreatedAt, gpu.ExpiresAt, gpu.LastHeartbeat, gpu.Metadata = got.CreatedAt, got.ExpiresAt, got.LastHeartbeat, got.Metadata
	require.Equal(t, gpu, got)

	got, err = b.s.LeaseGet(ctx, cpu.Token, false)
	require.NoError(t, err)
	require.Nil(t, got.GPUIndex)
	require.Empty(t, got.JobID)
	require.Equal(t, store.LeaseCPU, got.Mode)

	many, err := b.s.LeaseGetMany(ctx, []string{cpu.Token, gpu.Token, cpu.Token, b.prefix + "missing", ""}, false)
	require.NoError(t, err)
	require.Len(t, many, 2)

	require.ErrorIs(t, b.s.LeaseInsert(ctx, []store.Lease{cpu}), store.ErrConflict)
	_, err = b.s.LeaseGet(ctx, b.prefix+"missing", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.s.LeaseGet(ctx, "tøken", false)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testLeaseSetStatus(t *testing.T, b *bundle) {
	ctx := t.Context()
	l := b.lease("l", nil, 0)
	require.NoError(t, b.s.LeaseInsert(ctx, []store.Lease{l}))
	end := b.now.Add(10 * time.Second)
	require.NoError(t, b.s.LeaseSetStatus(ctx, store.LeaseStatusUpdate{
		Token: l.Token, From: store.LeaseActive, To: store.LeaseReleased, Now: end}))
	got, err := b.s.LeaseGet(ctx, l.Token, false)
	require.NoError(t, err)
	require.Equal(t, store.LeaseReleased, got.Status)
	requireTimePtr(t, &end, got.EndedAt, "ended_at")

	err = b.s.LeaseSetStatus(ctx, store.LeaseStatusUpdate{Token: l.Token, From: store.LeaseActive, To: store.LeaseExpired, Now: end})
	require.ErrorIs(t, err, store.ErrConflict, "a compare-and-set on a status that moved on")
	err = b.s.LeaseSetStatus(ctx, store.LeaseStatusUpdate{Token: b.prefix + "none", From: store.LeaseActive, To: store.LeaseExpired, Now: end})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testLeaseHeartbeat(t *testing.T, b *bundle) {
	ctx := t.Context()
	live := b.lease("live", nil, 0)
	live.TTL = 90 * time.Second
	late := b.lease("late", nil, 0) // past its expiry, not yet purged
	late.ExpiresAt = b.now.Add(-time.Second)
	ended := b.lease("ended", nil, 0)
	ended.Status, ended.EndedAt = store.LeaseReleased, &b.now
	require.NoError(t, b.s.LeaseInsert(ctx, []store.Lease{live, late, ended}))

	now := b.now.Add(5 * time.Second)
	got, err := b.s.LeaseHeartbeat(ctx, []string{live.Token, late.Token, ended.Token, b.prefix + "ghost"}, now)
	require.NoError(t, err)
	require.Len(t, got, 3)
	byToken := map[string]store.Lease{}
	for _, l := range got {
		byToken[l.Token] = l
	}
	requireTime(t, now.Add(90*time.Second), byToken[live.Token].ExpiresAt, "extended by its own ttl")
	requireTime(t, now, byToken[live.Token].LastHeartbeat, "last_heartbeat")
	requireTime(t, late.ExpiresAt, byToken[late.Token].ExpiresAt, "an expired lease is not resurrected")
	require.Equal(t, store.LeaseActive, byToken[late.Token].Status)
	requireTime(t, ended.ExpiresAt, byToken[ended.Token].ExpiresAt, "an ended lease is not touched")

	got, err = b.s.LeaseHeartbeat(ctx, nil, now)
	require.NoError(t, err)
	require.Empty(t, got)
}

func testLeaseListAndExpired(t *testing.T, b *bundle) {
	ctx := t.Context()
	a := b.lease("a", intp(0), 100)
	a.JobID = b.id("job-a")
	c := b.lease("c", nil, 0)
	c.CreatedAt = b.now.Add(time.Second)
	c.ExpiresAt = b.now.Add(-2 * time.Second)
	d := b.lease("d", nil, 0)
	d.CreatedAt = b.now.Add(2 * time.Second)
	d.ExpiresAt = b.now.Add(-time.Second)
	d.Status = store.LeaseExpired
	require.NoError(t, b.s.LeaseInsert(ctx, []store.Lease{a, c, d}))

	all, err := b.s.LeaseList(ctx, store.LeaseListParams{Agent: b.agent()})
	require.NoError(t, err)
	require.Equal(t, []string{d.Token, c.Token, a.Token}, leaseTokens(all), "newest first")
	active, err := b.s.LeaseList(ctx, store.LeaseListParams{Agent: b.agent(), Status: store.LeaseActive, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{c.Token}, leaseTokens(active))
	byJob, err := b.s.LeaseList(ctx, store.LeaseListParams{JobID: a.JobID})
	require.NoError(t, err)
	require.Equal(t, []string{a.Token}, leaseTokens(byJob))
	byNode, err := b.s.LeaseList(ctx, store.LeaseListParams{NodeID: a.NodeID, Status: store.LeaseExpired})
	require.NoError(t, err)
	require.Equal(t, []string{d.Token}, leaseTokens(byNode))

	expired, err := b.s.LeaseListExpired(ctx, b.now, 10000)
	require.NoError(t, err)
	require.Equal(t, []string{c.Token}, leaseTokens(b.ofSubtest(expired)), "active and past expiry only")
	expired, err = b.s.LeaseListExpired(ctx, b.now.Add(time.Hour), 10000)
	require.NoError(t, err)
	require.Equal(t, []string{c.Token, a.Token}, leaseTokens(b.ofSubtest(expired)), "oldest expiry first")
}

func testGPUSnapshotAndCapacity(t *testing.T, b *bundle) {
	ctx := t.Context()
	node := b.prefix + "node"
	dev := func(i int, total, used int64) store.GPUDevice {
		return store.GPUDevice{Index: i, UUID: "GPU-" + b.prefix, Name: "Test GPU", MemoryTotalMB: total,
			MemoryUsedMB: used, UtilizationPct: 10 * i, TemperatureC: 40 + i, PowerWatts: 100.5, Source: "simulated"}
	}
	require.NoError(t, b.s.GPUUpsertSnapshot(ctx, store.GPUSnapshot{NodeID: node, Now: b.now,
		GPUs: []store.GPUDevice{dev(0, 24576, 1000), dev(1, 24576, 0)}}))

	l1, l2 := b.lease("g0a", intp(0), 4000), b.lease("g0b", intp(0), 3000)
	l2.Exclusive = true
	gone := b.lease("g1", intp(1), 9000)
	gone.Status = store.LeaseExpired
	cpu := b.lease("cpu", nil, 0)
	require.NoError(t, b.s.LeaseInsert(ctx, []store.Lease{l1, l2, gone, cpu}))

	gpus, err := b.s.GPUList(ctx, node)
	require.NoError(t, err)
	require.Len(t, gpus, 2)
	require.Equal(t, node, gpus[0].NodeID)
	require.Equal(t, 0, gpus[0].Index)
	require.EqualValues(t, 7000, gpus[0].ReservedMB)
	require.Equal(t, 2, gpus[0].Leases)
	require.True(t, gpus[0].Exclusive)
	require.EqualValues(t, 1000, gpus[0].MemoryUsedMB)
	require.Equal(t, 40, gpus[0].TemperatureC)
	require.InDelta(t, 100.5, gpus[0].PowerWatts, 0.001)
	requireTime(t, b.now, gpus[0].UpdatedAt, "updated_at")
	require.Zero(t, gpus[1].ReservedMB, "only active leases count")
	require.False(t, gpus[1].Exclusive)

	all, err := b.s.GPUList(ctx, "")
	require.NoError(t, err)
	n := 0
	for _, g := range all {
		if g.NodeID == node {
			n++
		}
	}
	require.Equal(t, 2, n, "an empty node id lists every node")

	// The next snapshot lost GPU 0 (reported lost) and no longer lists GPU 1: its row goes.
	later := b.now.Add(time.Minute)
	lost := dev(0, 24576, 0)
	lost.Lost, lost.LostReason = true, "read memory: ERROR_GPU_IS_LOST"
	require.NoError(t, b.s.GPUUpsertSnapshot(ctx, store.GPUSnapshot{NodeID: node, Now: later,
		GPUs: []store.GPUDevice{lost, dev(2, 81920, 0)}}))
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error {
		gpus, err := tx.GPULockNode(ctx, node)
		require.NoError(t, err)
		require.Len(t, gpus, 2)
		require.True(t, gpus[0].Lost)
		require.Equal(t, "read memory: ERROR_GPU_IS_LOST", gpus[0].LostReason)
		require.EqualValues(t, 7000, gpus[0].ReservedMB, "leases outlive the telemetry")
		require.Equal(t, 2, gpus[1].Index)
		requireTime(t, later, gpus[1].UpdatedAt, "updated_at")
		return nil
	}))

	// An empty snapshot forgets the node; an unknown node has no rows.
	require.NoError(t, b.s.GPUUpsertSnapshot(ctx, store.GPUSnapshot{NodeID: node, Now: later}))
	gpus, err = b.s.GPUList(ctx, node)
	require.NoError(t, err)
	require.Empty(t, gpus)
}

func leaseTokens(leases []store.Lease) []string {
	out := make([]string, len(leases))
	for i, l := range leases {
		out[i] = l.Token
	}
	return out
}

// testMultiGPULease: a lease of several GPUs reads back with all of them, and reserves its
// memory on each (GPUList and GPULockNode), until it ends.
func testMultiGPULease(t *testing.T, b *bundle) {
	ctx := t.Context()
	node := b.prefix + "node"
	devs := make([]store.GPUDevice, 4)
	for i := range devs {
		devs[i] = store.GPUDevice{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", b.prefix, i), MemoryTotalMB: 81920, Source: "simulated"}
	}
	require.NoError(t, b.s.GPUUpsertSnapshot(ctx, store.GPUSnapshot{NodeID: node, Now: b.now, GPUs: devs}))
	pair := b.lease("pair", intp(3), 30000)
	pair.GPUIndexes = []int{3, 1}
	pair.Exclusive = true
	one := b.lease("one", intp(1), 2000)
	require.NoError(t, b.s.LeaseInsert(ctx, []store.Lease{pair, one}))

	got, err := b.s.LeaseGet(ctx, pair.Token, false)
	require.NoError(t, err)
	require.Equal(t, []int{3, 1}, got.GPUIndexes)
	require.Equal(t, 3, *got.GPUIndex)
	listed, err := b.s.LeaseList(ctx, store.LeaseListParams{NodeID: node, Limit: 10})
	require.NoError(t, err)
	for _, l := range listed {
		if l.Token == pair.Token {
			require.Equal(t, []int{3, 1}, l.GPUIndexes)
		}
	}

	reserved := func(gpus []store.GPUCapacity) (mb []int64, leases []int, exclusive []bool) {
		for _, g := range gpus {
			mb, leases, exclusive = append(mb, g.ReservedMB), append(leases, g.Leases), append(exclusive, g.Exclusive)
		}
		return mb, leases, exclusive
	}
	gpus, err := b.s.GPUList(ctx, node)
	require.NoError(t, err)
	mb, n, ex := reserved(gpus)
	require.Equal(t, []int64{0, 32000, 0, 30000}, mb, "the pair's memory on each of its GPUs")
	require.Equal(t, []int{0, 2, 0, 1}, n)
	require.Equal(t, []bool{false, true, false, true}, ex)
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error {
		locked, err := tx.GPULockNode(ctx, node)
		require.NoError(t, err)
		lmb, _, _ := reserved(locked)
		require.Equal(t, mb, lmb, "placement sees what the listing sees")
		return nil
	}))

	require.NoError(t, b.s.LeaseSetStatus(ctx, store.LeaseStatusUpdate{
		Token: pair.Token, From: store.LeaseActive, To: store.LeaseReleased, Now: b.now.Add(time.Second)}))
	gpus, err = b.s.GPUList(ctx, node)
	require.NoError(t, err)
	mb, _, ex = reserved(gpus)
	require.Equal(t, []int64{0, 2000, 0, 0}, mb, "a released lease frees every GPU it held")
	require.Equal(t, []bool{false, false, false, false}, ex)
}

// testLeaseHoldings: an agent holds the GPUs and memory of its active gpu leases, a lease of
// several GPUs counting each; cpu leases, ended leases and other agents' leases do not count.
func testLeaseHoldings(t *testing.T, b *bundle) {
	ctx := t.Context()
	other := b.prefix + "other"
	pair := b.lease("pair", intp(0), 10000)
	pair.GPUIndexes = []int{0, 2}
	sameGPU := b.lease("same-gpu", intp(0), 3000) // the agent's second share of GPU 0: counts again
	cpu := b.lease("cpu", nil, 500)
	ended := b.lease("ended", intp(1), 7000)
	theirs := b.lease("theirs", intp(1), 4000)
	theirs.Agent = other
	require.NoError(t, b.s.LeaseInsert(ctx, []store.Lease{pair, sameGPU, cpu, ended, theirs}))
	require.NoError(t, b.s.LeaseSetStatus(ctx, store.LeaseStatusUpdate{
		Token: ended.Token, From: store.LeaseActive, To: store.LeaseReleased, Now: b.now.Add(time.Second)}))

	got, err := b.s.LeaseHoldings(ctx, []string{b.agent(), other, b.prefix + "nobody", b.agent()})
	require.NoError(t, err)
	require.Equal(t, map[string]store.GPUHolding{
		b.agent(): {GPUs: 3, MemoryMB: 2*10000 + 3000},
		other:     {GPUs: 1, MemoryMB: 4000},
	}, got, "an agent without active gpu leases is absent")

	// Read in a transaction after the GPU rows are locked, as the scheduler and a grant do.
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error {
		if _, err := tx.GPULockAll(ctx); err != nil {
			return err
		}
		in, err := tx.LeaseHoldings(ctx, []string{other})
		require.NoError(t, err)
		require.Equal(t, map[string]store.GPUHolding{other: {GPUs: 1, MemoryMB: 4000}}, in)
		return nil
	}))
	none, err := b.s.LeaseHoldings(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

// testJobLeases checks the leases held in job rows: the claim writes the token and expiry with
// the job's update, a heartbeat extends only a live, unexpired lease whose token the job holds,
// and the expired ones are listed until their job's token is cleared.
func testJobLeases(t *testing.T, b *bundle) {
	ctx := t.Context()
	token := func(id string) string { return store.JobLeaseTokenPrefix + strings.Repeat("ab", 16) + "_" + id }
	claim := func(name string) (store.Job, string) {
		j := b.insert(t, name)
		tok, one, worker := token(j.ID), 1, "w-"+b.prefix
		expires := b.now.Add(time.Minute)
		require.NoError(t, b.s.JobUpdate(ctx, store.JobUpdate{ID: j.ID, From: store.JobPending, To: store.JobClaimed,
			Attempts: &one, WorkerID: &worker, LeaseToken: &tok, LeaseExpiresAt: &expires, Now: b.now}))
		got, err := b.s.JobGet(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, tok, got.LeaseToken)
		require.NotNil(t, got.LeaseExpiresAt)
		require.True(t, got.LeaseExpiresAt.Equal(expires.Truncate(time.Microsecond)))
		return got, tok
	}
	live, liveTok := claim("live")
	quiet, quietTok := claim("quiet")
	expiry := func(id string) time.Time {
		j, err := b.s.JobGet(ctx, id)
		require.NoError(t, err)
		return *j.LeaseExpiresAt
	}

	// Renewed at +30 s: the live one, with its token; a wrong token renews nothing.
	until := b.now.Add(2 * time.Minute).Truncate(time.Microsecond)
	jobs, err := b.s.JobLeaseHeartbeat(ctx, []string{live.ID, quiet.ID}, []string{liveTok, token(quiet.ID) + "x"},
		until, b.now.Add(30*time.Second))
	require.NoError(t, err)
	require.Len(t, jobs, 2, "every job asked for comes back")
	require.True(t, expiry(live.ID).Equal(until))
	require.True(t, expiry(quiet.ID).Before(until))

	// Past its expiry, a lease is never renewed again, and it is listed as expired.
	late := b.now.Add(90 * time.Second)
	_, err = b.s.JobLeaseHeartbeat(ctx, []string{quiet.ID}, []string{quietTok}, late.Add(time.Minute), late)
	require.NoError(t, err)
	require.True(t, expiry(quiet.ID).Before(late))
	expired := func(now time.Time) []string {
		jobs, err := b.s.JobLeasesExpired(ctx, now, 10000)
		require.NoError(t, err)
		var ids []string
		for _, j := range jobs {
			if strings.HasPrefix(j.ID, b.prefix) {
				ids = append(ids, j.ID)
			}
		}
		return ids
	}
	require.Equal(t, []string{quiet.ID}, expired(late))
	require.Equal(t, []string{quiet.ID, live.ID}, expired(b.now.Add(3*time.Minute)), "oldest expiry first")

	// Counted per node through the worker's row (none registered here: node "").
	counts, err := b.s.LeaseJobsPerNode(ctx)
	require.NoError(t, err)
	n := 0
	for _, c := range counts {
		if c.Agent == b.agent() {
			require.Equal(t, "w-"+b.prefix, c.Worker)
			n += c.Jobs
		}
	}
	require.Equal(t, 2, n)

	// The attempt ends: its token is cleared with the job's transition, and the lease is gone.
	empty := ""
	require.NoError(t, b.s.JobUpdate(ctx, store.JobUpdate{ID: quiet.ID, From: store.JobClaimed, To: store.JobPending,
		LeaseToken: &empty, WorkerID: &empty, Now: late}))
	require.Equal(t, []string{live.ID}, expired(b.now.Add(3*time.Minute)))
}
