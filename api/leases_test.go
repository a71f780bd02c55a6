package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/wire"
)

// testClock is a clock that moves only when told.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// setupClock is setup with an engine on a test clock, the orchestrator's node "orch-node".
func setupClock(t *testing.T) (*bundle, *testClock) {
	t.Helper()
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	ck := &testClock{now: time.Now().UTC().Truncate(time.Second)}
	cfg := testConfig(t)
	cfg.NodeID = "orch-node"
	b := newStack(st, sc, cfg, engine.Options{Now: ck.Now, Logger: slog.New(slog.DiscardHandler)})
	set, tokens := testTokens(t)
	b.srv, b.tokens = New(b.with(Options{Auth: AuthOptions{Tokens: set}, Logger: slog.New(slog.DiscardHandler)})), tokens
	return b, ck
}

// reportGPUs records node's telemetry: idle GPUs of the given sizes.
func (b *bundle) reportGPUs(t *testing.T, node string, totals ...int64) {
	t.Helper()
	snap := telemetry.Snapshot{NodeID: node, Source: telemetry.SourceSimulated}
	for i, mb := range totals {
		snap.GPUs = append(snap.GPUs, telemetry.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), MemoryTotalMB: mb})
	}
	require.NoError(t, b.lm.RecordSnapshot(context.Background(), snap))
}

func (b *bundle) grant(t *testing.T, who string, req wire.LeaseRequest) wire.LeaseGrant {
	t.Helper()
	rec := b.request(t, http.MethodPost, "/leases", who, req)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	return decode[wire.LeaseGrant](t, rec)
}

func TestLeaseRoutes(t *testing.T) {
	t.Parallel()
	b, ck := setupClock(t)
	b.reportGPUs(t, "orch-node", 24576, 24576)
	b.reportGPUs(t, "gpu-b", 81920)

	t.Run("GrantOnTheOrchestratorsNode", func(t *testing.T) {
		g := b.grant(t, "alice", wire.LeaseRequest{MinMemoryMB: 20000, TTLSeconds: 60})
		require.True(t, g.Granted)
		require.Equal(t, "orch-node", g.NodeID)
		require.Equal(t, wire.LeaseModeGPU, g.Mode)
		require.NotNil(t, g.GPUIndex)
		require.EqualValues(t, 20000, g.MemoryMB)
		require.Regexp(t, `^lt_[0-9a-f]{32}$`, g.Token)
		require.True(t, g.ExpiresAt.Equal(ck.Now().Add(time.Minute)))

		l := decode[wire.LeaseList](t, b.request(t, http.MethodGet, "/leases?status=active", "alice", nil))
		require.Len(t, l.Leases, 1)
		require.Equal(t, "alice", l.Leases[0].Agent)
		require.Empty(t, decode[wire.LeaseList](t, b.request(t, http.MethodGet, "/leases", "bob", nil)).Leases,
			"an agent sees its own leases only")
		requireError(t, b.request(t, http.MethodGet, "/leases?agent=alice", "bob", nil), http.StatusForbidden, CodeForbidden, "")
	})

	t.Run("DenialsSayWhy", func(t *testing.T) {
		requireError(t, b.request(t, http.MethodPost, "/leases", "alice", wire.LeaseRequest{NodeID: "gpu-b", MinMemoryMB: 90000}),
			http.StatusConflict, wire.CodeNoCapacity, "")
		requireError(t, b.request(t, http.MethodPost, "/leases", "alice", wire.LeaseRequest{NodeID: "nowhere", MinMemoryMB: 1}),
			http.StatusConflict, wire.CodeNodeUnknown, "")
		b.reportGPUs(t, "stale-node", 24576)
		ck.Add(b.cfg.Leases.TelemetryFreshness)
		requireError(t, b.request(t, http.MethodPost, "/leases", "alice", wire.LeaseRequest{NodeID: "stale-node", MinMemoryMB: 1}),
			http.StatusConflict, wire.CodeTelemetryStale, "")
		b.reportGPUs(t, "orch-node", 24576, 24576)
		b.reportGPUs(t, "gpu-b", 81920)
	})

	t.Run("ExclusiveTakesAWholeGPU", func(t *testing.T) {
		g := b.grant(t, "bob", wire.LeaseRequest{NodeID: "gpu-b", MinMemoryMB: 1000, Exclusive: true})
		require.EqualValues(t, 81920-512, g.MemoryMB)
		d := requireError(t, b.request(t, http.MethodPost, "/leases", "bob", wire.LeaseRequest{NodeID: "gpu-b", MinMemoryMB: 1}),
			http.StatusConflict, wire.CodeNoCapacity, "")
		require.Contains(t, d.Message, "gpu-b")
		_ = decode[wire.Lease](t, b.request(t, http.MethodPost, "/leases/"+g.Token+"/release", "bob", nil))
		b.grant(t, "bob", wire.LeaseRequest{NodeID: "gpu-b", MinMemoryMB: 1})
	})

	t.Run("HeartbeatReleaseAndExpiry", func(t *testing.T) {
		g := b.grant(t, "alice", wire.LeaseRequest{Mode: wire.LeaseModeCPU, TTLSeconds: 10})
		require.Nil(t, g.GPUIndex)
		ck.Add(5 * time.Second)
		l := decode[wire.Lease](t, b.request(t, http.MethodPost, "/leases/"+g.Token+"/heartbeat", "alice", nil))
		require.True(t, l.ExpiresAt.Equal(ck.Now().Add(10*time.Second)), "extended by its ttl")
		requireError(t, b.request(t, http.MethodPost, "/leases/"+g.Token+"/heartbeat", "bob", nil), http.StatusNotFound, CodeNotFound, "")
		requireError(t, b.request(t, http.MethodPost, "/leases/lt_00000000000000000000000000000000/heartbeat", "alice", nil),
			http.StatusNotFound, CodeNotFound, "")
		requireError(t, b.request(t, http.MethodPost, "/leases/garbage/heartbeat", "alice", nil), http.StatusNotFound, CodeNotFound, "")

		// Quiet past its expiry: a heartbeat does not resurrect it, even before the purge.
		ck.Add(10 * time.Second)
		requireError(t, b.request(t, http.MethodPost, "/leases/"+g.Token+"/heartbeat", "alice", nil),
			http.StatusGone, wire.CodeLeaseExpired, "")

		r := b.grant(t, "alice", wire.LeaseRequest{Mode: wire.LeaseModeCPU})
		rel := decode[wire.Lease](t, b.request(t, http.MethodPost, "/leases/"+r.Token+"/release", "admin", nil))
		require.Equal(t, wire.LeaseReleased, rel.Status)
		require.NotNil(t, rel.EndedAt)
		again := b.request(t, http.MethodPost, "/leases/"+r.Token+"/release", "alice", nil)
		require.Equal(t, http.StatusOK, again.Code, "a second release is harmless")
		requireError(t, b.request(t, http.MethodPost, "/leases/"+r.Token+"/heartbeat", "alice", nil),
			http.StatusGone, wire.CodeLeaseReleased, "")
	})

	t.Run("BadInput", func(t *testing.T) {
		cases := []struct {
			name, who string
			body      string
			field     string
		}{
			{"Mode", "alice", `{"min_memory_mb":1,"mode":"tpu"}`, "mode"},
			{"NoMemory", "alice", `{"min_memory_mb":0}`, "min_memory_mb"},
			{"NegativeTTL", "alice", `{"min_memory_mb":1,"ttl_seconds":-1}`, "ttl_seconds"},
			{"LongTTL", "alice", `{"min_memory_mb":1,"ttl_seconds":86401}`, "ttl_seconds"},
			{"BadNode", "alice", `{"min_memory_mb":1,"node_id":"a b"}`, "node_id"},
			{"Metadata", "alice", `{"min_memory_mb":1,"metadata":[1]}`, "metadata"},
			{"CPUExclusive", "alice", `{"mode":"cpu","exclusive":true}`, "exclusive"},
			{"AdminNamesAgent", "admin", `{"min_memory_mb":1}`, "agent"},
			{"Unknown", "alice", `{"min_memory_mb":1,"gpu":0}`, "gpu"},
		}
		for _, tc := range cases {
			requireError(t, b.request(t, http.MethodPost, "/leases", tc.who, tc.body), http.StatusBadRequest, CodeInvalidRequest, tc.field)
		}
		requireError(t, b.request(t, http.MethodPost, "/leases", "alice", `{"agent":"bob","min_memory_mb":1}`),
			http.StatusForbidden, CodeForbidden, "")
		requireError(t, b.request(t, http.MethodPost, "/leases", "worker", `{"agent":"a","min_memory_mb":1}`),
			http.StatusForbidden, CodeForbidden, "")
	})

	t.Run("GPUs", func(t *testing.T) {
		b.reportGPUs(t, "orch-node", 24576, 24576)
		ck.Add(2 * time.Second)
		gpus := decode[wire.GPUList](t, b.request(t, http.MethodGet, "/gpus?node_id=orch-node", "admin", nil)).GPUs
		require.Len(t, gpus, 2)
		var reserved int64
		for _, g := range gpus {
			reserved += g.MemoryReservedMB
			require.Equal(t, g.MemoryTotalMB-g.MemoryReservedMB-512, g.MemoryFreeMB, "free = total - max(used, reserved) - margin")
			require.InDelta(t, 2.0, g.AgeSeconds, 0.01)
			require.True(t, g.Fresh)
		}
		require.EqualValues(t, 20000, reserved)
		require.Len(t, decode[wire.GPUList](t, b.request(t, http.MethodGet, "/gpus", "alice", nil)).GPUs, 4)
		requireError(t, b.request(t, http.MethodGet, "/gpus", "worker", nil), http.StatusForbidden, CodeForbidden, "")
	})
}

func TestWorkerLeases(t *testing.T) {
	t.Parallel()
	b, ck := setupClock(t)
	ctx := context.Background()

	t.Run("RenewReportsTelemetryAndGoneLeases", func(t *testing.T) {
		id := b.submitJob(t, "alice")
		claimed := b.claimOne(t, id)
		require.NotEmpty(t, claimed.LeaseToken)
		require.Equal(t, wire.Duration(b.cfg.Leases.TTL), claimed.LeaseTTL)
		require.NotNil(t, claimed.LeaseExpiresAt)

		ck.Add(b.cfg.Leases.TTL / 2)
		rec := b.request(t, http.MethodPost, "/internal/leases/renew", "worker", wire.RenewRequest{
			WorkerID: "w1", NodeID: "node-1", Tokens: []string{claimed.LeaseToken, "lt_00000000000000000000000000000000"},
			Telemetry: &wire.NodeTelemetry{NodeID: "node-1", Source: telemetry.SourceSimulated,
				GPUs: []wire.GPUTelemetry{{Index: 0, UUID: "GPU-x", MemoryTotalMB: 24576, MemoryUsedMB: 100}},
				Lost: []wire.LostGPUTelemetry{{Index: 1, Reason: "fell off the bus"}}},
		})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		res := decode[wire.RenewResponse](t, rec)
		require.Len(t, res.Renewed, 1)
		require.True(t, res.Renewed[0].ExpiresAt.Equal(ck.Now().Add(b.cfg.Leases.TTL)))
		require.Equal(t, []wire.GoneLease{{Token: "lt_00000000000000000000000000000000", Status: "unknown"}}, res.Gone)
		require.Equal(t, []wire.GPUReservation{{GPUIndex: 0}, {GPUIndex: 1}}, res.Reserved)

		gpus := decode[wire.GPUList](t, b.request(t, http.MethodGet, "/gpus?node_id=node-1", "admin", nil)).GPUs
		require.Len(t, gpus, 2)
		require.EqualValues(t, 100, gpus[0].MemoryUsedMB)
		require.True(t, gpus[1].Lost)
		require.Equal(t, "fell off the bus", gpus[1].LostReason)
		require.False(t, gpus[1].Fresh)

		// A job's lease cannot be released by hand: cancel the job.
		requireError(t, b.request(t, http.MethodPost, "/leases/"+claimed.LeaseToken+"/release", "admin", nil),
			http.StatusConflict, wire.CodeLeaseBoundToJob, "")
	})

	t.Run("ZombieCompletionIsRefused", func(t *testing.T) {
		id, other := b.submitJob(t, "alice"), b.submitJob(t, "alice")
		zombie, live := b.claimOne(t, id), b.claimOne(t, other)
		ck.Add(b.cfg.Leases.TTL / 2)
		_, err := b.lm.Renew(ctx, leasesRenew(live.LeaseToken))
		require.NoError(t, err)
		ck.Add(b.cfg.Leases.TTL / 2) // the zombie's lease is past its expiry, the other's is not

		result := func(c wire.ClaimedJob) wire.JobResult {
			return wire.JobResult{JobID: c.JobID, Attempt: c.Attempt, LeaseToken: c.LeaseToken, Status: wire.ResultDone}
		}
		rec := b.request(t, http.MethodPost, "/internal/jobs/complete", "worker", wire.CompleteRequest{
			WorkerID: "w1", Results: []wire.JobResult{result(zombie)}})
		requireError(t, rec, http.StatusConflict, wire.CodeLeaseExpired, "")

		// In a batch with a result that counts, the refusal is per result.
		rec = b.request(t, http.MethodPost, "/internal/jobs/complete", "worker", wire.CompleteRequest{
			WorkerID: "w1", Results: []wire.JobResult{result(zombie), result(live)}})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, []wire.CompleteOutcome{
			{JobID: id, Outcome: wire.OutcomeLeaseExpired, Status: "claimed"},
			{JobID: other, Outcome: wire.OutcomeDone, Status: "done"},
		}, decode[wire.CompleteResponse](t, rec).Outcomes)
	})

	t.Run("BadRenew", func(t *testing.T) {
		cases := []struct{ name, body, field string }{
			{"NoWorker", `{"tokens":[]}`, "worker_id"},
			{"TelemetryWithoutNode", `{"worker_id":"w1","tokens":[],"telemetry":{"node_id":"n","source":"simulated","gpus":[]}}`, "node_id"},
			{"OtherNode", `{"worker_id":"w1","node_id":"a","tokens":[],"telemetry":{"node_id":"b","source":"simulated","gpus":[]}}`, "telemetry.node_id"},
			{"Source", `{"worker_id":"w1","node_id":"a","tokens":[],"telemetry":{"node_id":"a","source":"x","gpus":[]}}`, "telemetry.source"},
			{"DupIndex", `{"worker_id":"w1","node_id":"a","tokens":[],"telemetry":{"node_id":"a","source":"nvml","gpus":[{"index":0},{"index":0}]}}`, "telemetry.gpus[1].index"},
		}
		for _, tc := range cases {
			requireError(t, b.request(t, http.MethodPost, "/internal/leases/renew", "worker", tc.body),
				http.StatusBadRequest, CodeInvalidRequest, tc.field)
		}
		requireError(t, b.request(t, http.MethodPost, "/internal/leases/renew", "alice", `{"worker_id":"w1","tokens":[]}`),
			http.StatusForbidden, CodeForbidden, "")
	})
}

func leasesRenew(tokens ...string) leases.RenewParams {
	return leases.RenewParams{WorkerID: "w1", Tokens: tokens}
}
