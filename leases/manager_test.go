package leases_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type bundle struct {
	m     *leases.Manager
	st    store.Store
	clock *clock
}

func setup(t testing.TB) *bundle {
	t.Helper()
	st := testenv.MySQLStore(t)
	ck := &clock{now: time.Now().UTC().Truncate(time.Second)}
	m, err := leases.New(st, leases.Config{}, leases.Options{Now: ck.Now, Logger: slog.New(slog.DiscardHandler), NodeID: "here"})
	require.NoError(t, err)
	return &bundle{m: m, st: st, clock: ck}
}

// simulate records telemetry of node from a simulated provider of spec and returns it.
func (b *bundle) simulate(t testing.TB, node, spec string) *telemetry.Simulated {
	t.Helper()
	sim, err := telemetry.NewSimulated(node, spec)
	require.NoError(t, err)
	snap, err := sim.Snapshot(context.Background())
	require.NoError(t, err)
	require.NoError(t, b.m.RecordSnapshot(context.Background(), snap))
	return sim
}

func gpuParams(agent, node string, mb int64) leases.GrantParams {
	return leases.GrantParams{Agent: agent, NodeID: node, Mode: store.LeaseGPU, MemoryMB: mb, Actor: "agent:" + agent}
}

func TestManager(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("GrantAuditsAndDefaults", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.simulate(t, "here", "24576")
		l, err := b.m.Grant(ctx, gpuParams("a", "", 1000))
		require.NoError(t, err)
		require.Equal(t, "here", l.NodeID, "the orchestrator's node by default")
		require.Equal(t, 30*time.Second, l.TTL)
		require.Equal(t, 0, *l.GPUIndex)
		evs, err := b.st.AuditList(ctx, store.AuditListParams{Limit: 10})
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, leases.EventGranted, evs[0].EventType)
		require.Equal(t, l.Token, evs[0].LeaseToken)
		require.Equal(t, "agent:a", evs[0].Actor)
		require.JSONEq(t, `{"mode":"gpu","node_id":"here","memory_mb":1000,"ttl_ms":30000,"agent":"a","gpu_index":0}`,
			string(evs[0].Details))

		_, err = b.m.Grant(ctx, gpuParams("a", "", 24000))
		var d *leases.DenialError
		require.ErrorAs(t, err, &d)
		require.Equal(t, leases.ReasonNoCapacity, d.Reason)
	})

	t.Run("HeartbeatNeverResurrects", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l, err := b.m.Grant(ctx, leases.GrantParams{Agent: "a", Mode: store.LeaseCPU, TTL: 9 * time.Second})
		require.NoError(t, err)
		b.clock.Add(6 * time.Second)
		got, err := b.m.Heartbeat(ctx, l.Token, "a")
		require.NoError(t, err)
		require.True(t, got.ExpiresAt.Equal(b.clock.Now().Add(9*time.Second)))
		_, err = b.m.Heartbeat(ctx, l.Token, "b")
		require.ErrorIs(t, err, store.ErrNotFound, "another agent's lease does not exist for it")
		b.clock.Add(9 * time.Second)
		_, err = b.m.Heartbeat(ctx, l.Token, "")
		var gone *leases.GoneError
		require.ErrorAs(t, err, &gone)
		stored, err := b.st.LeaseGet(ctx, l.Token, false)
		require.NoError(t, err)
		require.False(t, stored.ExpiresAt.After(b.clock.Now()), "the expiry did not move")
		_, err = b.m.Heartbeat(ctx, leases.NewToken(), "")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("ReleaseFreesTheGPU", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.simulate(t, "n1", "16384")
		l, err := b.m.Grant(ctx, gpuParams("a", "n1", 15000))
		require.NoError(t, err)
		_, err = b.m.Grant(ctx, gpuParams("a", "n1", 15000))
		require.Error(t, err)
		_, err = b.m.Release(ctx, l.Token, "b", "agent:b")
		require.ErrorIs(t, err, store.ErrNotFound)
		rel, err := b.m.Release(ctx, l.Token, "a", "agent:a")
		require.NoError(t, err)
		require.Equal(t, store.LeaseReleased, rel.Status)
		_, err = b.m.Grant(ctx, gpuParams("a", "n1", 15000))
		require.NoError(t, err)
	})

	t.Run("TokensAreRandom", func(t *testing.T) {
		t.Parallel()
		seen := map[string]bool{}
		for range 1000 {
			tok := leases.NewToken()
			require.Regexp(t, `^lt_[0-9a-f]{32}$`, tok)
			require.False(t, seen[tok])
			seen[tok] = true
		}
	})

	t.Run("CPUSnapshotsEraseNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.simulate(t, "shared", "2x24576")
		require.NoError(t, b.m.RecordSnapshot(ctx, telemetry.Snapshot{NodeID: "shared", Source: telemetry.SourceNone}))
		gpus, err := b.m.GPUs(ctx, "shared")
		require.NoError(t, err)
		require.Len(t, gpus, 2, "a CPU-only reporter of the same node leaves the GPU rows alone")
	})

	t.Run("LostGPUIsReportedAndSkipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sim := b.simulate(t, "n2", "2x24576")
		require.NoError(t, sim.SetLost(0, true))
		snap, err := sim.Snapshot(ctx)
		require.NoError(t, err)
		require.NoError(t, b.m.RecordSnapshot(ctx, snap))
		gpus, err := b.m.GPUs(ctx, "n2")
		require.NoError(t, err)
		require.True(t, gpus[0].Lost)
		require.False(t, gpus[0].Fresh)
		for range 2 {
			l, err := b.m.Grant(ctx, gpuParams("a", "n2", 1000))
			require.NoError(t, err)
			require.Equal(t, 1, *l.GPUIndex, "never the lost GPU")
		}
	})
}

func TestSimulatedFollowsGrantsAndReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sim := b.simulate(t, "here", "2x24576")
	follower := b.m.Follow(sim, "here")
	used := func() []int64 {
		snap, err := follower.Snapshot(ctx)
		require.NoError(t, err)
		require.NoError(t, b.m.RecordSnapshot(ctx, snap))
		return []int64{snap.GPUs[0].MemoryUsedMB, snap.GPUs[1].MemoryUsedMB}
	}
	require.Equal(t, []int64{0, 0}, used())
	l1, err := b.m.Grant(ctx, gpuParams("a", "", 10000))
	require.NoError(t, err)
	l2, err := b.m.Grant(ctx, gpuParams("a", "", 20000))
	require.NoError(t, err)
	want := []int64{0, 0}
	want[*l1.GPUIndex] += 10000
	want[*l2.GPUIndex] += 20000
	require.Equal(t, want, used(), "the simulation shows the grants as used")
	_, err = b.m.Release(ctx, l1.Token, "", "admin")
	require.NoError(t, err)
	want[*l1.GPUIndex] -= 10000
	require.Equal(t, want, used(), "and the release as freed")
	require.Equal(t, telemetry.SourceSimulated, follower.Name())
}

func TestRenew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sim, err := telemetry.NewSimulated("w-node", "24576")
	require.NoError(t, err)
	snap, err := sim.Snapshot(ctx)
	require.NoError(t, err)
	res, err := b.m.Renew(ctx, leases.RenewParams{WorkerID: "w1", NodeID: "w-node", Snapshot: &snap})
	require.NoError(t, err)
	require.Empty(t, res.Renewed)
	require.Equal(t, map[int]int64{0: 0}, res.Reserved)

	live, err := b.m.Grant(ctx, gpuParams("a", "w-node", 4000))
	require.NoError(t, err)
	released, err := b.m.Grant(ctx, leases.GrantParams{Agent: "a", NodeID: "w-node", Mode: store.LeaseCPU})
	require.NoError(t, err)
	_, err = b.m.Release(ctx, released.Token, "", "admin")
	require.NoError(t, err)
	b.clock.Add(10 * time.Second)
	res, err = b.m.Renew(ctx, leases.RenewParams{WorkerID: "w1", NodeID: "w-node",
		Tokens: []string{live.Token, released.Token, "lt_unknown"}})
	require.NoError(t, err)
	require.Len(t, res.Renewed, 1)
	require.True(t, res.Renewed[0].ExpiresAt.Equal(b.clock.Now().Add(30*time.Second)))
	require.ElementsMatch(t, []leases.GoneLease{
		{Token: released.Token, Status: store.LeaseReleased}, {Token: "lt_unknown"},
	}, res.Gone)
	require.Equal(t, map[int]int64{0: 4000}, res.Reserved)

	other := snap
	other.NodeID = "elsewhere"
	_, err = b.m.Renew(ctx, leases.RenewParams{WorkerID: "w1", NodeID: "w-node", Snapshot: &other})
	require.Error(t, err)
	_, err = b.m.Renew(ctx, leases.RenewParams{WorkerID: "w1", Tokens: make([]string, leases.MaxRenewTokens+1)})
	require.Error(t, err)
}

// TestRenewLogsGone: leases a renewal finds released (the worker's own round released them) are
// not worth an info line; expired or unknown ones are.
func TestRenewLogsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var logs bytes.Buffer // Renew logs before it returns
	m, err := leases.New(b.st, leases.Config{}, leases.Options{Now: b.clock.Now,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), NodeID: "here"})
	require.NoError(t, err)
	released, err := m.Grant(ctx, leases.GrantParams{Agent: "a", NodeID: "w-node", Mode: store.LeaseCPU})
	require.NoError(t, err)
	_, err = m.Release(ctx, released.Token, "", "worker:w1")
	require.NoError(t, err)

	res, err := m.Renew(ctx, leases.RenewParams{WorkerID: "w1", Tokens: []string{released.Token}})
	require.NoError(t, err)
	require.Len(t, res.Gone, 1)
	require.NotContains(t, logs.String(), "renewed leases that are gone", "released leases alone: a debug line")

	_, err = m.Renew(ctx, leases.RenewParams{WorkerID: "w1", Tokens: []string{released.Token, "lt_unknown"}})
	require.NoError(t, err)
	require.Contains(t, logs.String(), `level=INFO msg="worker renewed leases that are gone" component=leases worker_id=w1 gone=2 released=1`)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []leases.Config{{TTL: -time.Second}, {TTL: 25 * time.Hour}, {SafetyMarginMB: -1}, {TelemetryFreshness: -1}} {
		_, err := leases.New(nil, cfg, leases.Options{})
		require.Error(t, err, fmt.Sprint(cfg))
	}
	_, err := leases.New(nil, leases.Config{}, leases.Options{})
	require.NoError(t, err)
}
