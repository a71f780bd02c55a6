package api

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// setupPools is the real stack with the pools service, and the service itself.
func setupPools(t *testing.T) (*bundle, *pools.Service) {
	t.Helper()
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	cfg := testConfig(t)
	log := slog.New(slog.DiscardHandler)
	b := newStack(st, sc, cfg, engine.Options{Logger: log})
	svc := pools.NewService(st, sc, cfg, pools.ServiceOptions{Logger: log})
	set, tokens := testTokens(t)
	b.srv, b.tokens = New(b.with(Options{Auth: AuthOptions{Tokens: set}, Logger: log, Pools: svc})), tokens
	return b, svc
}

var mistral = wire.PoolRequest{PoolID: "mistral", AgentName: "alice", ModelID: "mistral-7b", Adapter: "vllm",
	Types: []string{"noop"}, DesiredWorkers: 2, HoldSeconds: 300}

func TestPoolsAPI(t *testing.T) {
	t.Parallel()

	t.Run("CreateGetListIdempotent", func(t *testing.T) {
		t.Parallel()
		b, _ := setupPools(t)
		rec := b.request(t, http.MethodPost, "/workers/pool", "admin", mistral)
		require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
		created := decode[wire.PoolResponse](t, rec)
		require.True(t, created.Created)
		require.Equal(t, wire.PoolStarting, created.Pool.Status)
		require.NotEmpty(t, created.PreloadID)

		rec = b.request(t, http.MethodPost, "/workers/pool", "admin", mistral)
		require.Equal(t, http.StatusOK, rec.Code)
		again := decode[wire.PoolResponse](t, rec)
		require.False(t, again.Created)
		require.False(t, again.Updated)

		scaled := mistral
		scaled.DesiredWorkers = 4
		rec = b.request(t, http.MethodPost, "/workers/pool", "admin", scaled)
		require.Equal(t, http.StatusOK, rec.Code)
		require.True(t, decode[wire.PoolResponse](t, rec).Updated)

		rec = b.request(t, http.MethodGet, "/workers/pools", "alice", nil)
		require.Equal(t, http.StatusOK, rec.Code)
		list := decode[wire.PoolList](t, rec)
		require.Len(t, list.Pools, 1)
		require.Equal(t, 4, list.Pools[0].DesiredWorkers)

		rec = b.request(t, http.MethodPost, "/internal/workers/register", "worker", wire.RegisterWorkerRequest{
			WorkerID: "mistral-1", PoolID: "mistral", NodeID: "n1", Types: []string{"noop"}, Concurrency: 2})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		rec = b.request(t, http.MethodGet, "/workers/pools/mistral", "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code)
		got := decode[wire.Pool](t, rec)
		require.Len(t, got.Workers, 1)
		require.Equal(t, "mistral-1", got.Workers[0].WorkerID)
		require.Equal(t, wire.WorkerIdle, got.Workers[0].Status)

		requireError(t, b.request(t, http.MethodGet, "/workers/pools/nope", "admin", nil), http.StatusNotFound, CodeNotFound, "")
	})

	t.Run("BadInputAndRoles", func(t *testing.T) {
		t.Parallel()
		b, _ := setupPools(t)
		bad := mistral
		bad.DesiredWorkers = -1
		requireError(t, b.request(t, http.MethodPost, "/workers/pool", "admin", bad), http.StatusBadRequest, CodeInvalidRequest, "desired_workers")
		bad = mistral
		bad.Types = []string{"unknown"}
		requireError(t, b.request(t, http.MethodPost, "/workers/pool", "admin", bad), http.StatusBadRequest, CodeInvalidRequest, "types")
		requireError(t, b.request(t, http.MethodPost, "/workers/pool", "admin", `{"pool_id":"x","gpu":1}`), http.StatusBadRequest, CodeInvalidRequest, "gpu")
		requireError(t, b.request(t, http.MethodPost, "/workers/pool", "alice", mistral), http.StatusForbidden, CodeForbidden, "")
		requireError(t, b.request(t, http.MethodPost, "/control/evict_pool", "alice", wire.EvictRequest{PoolID: "x"}), http.StatusForbidden, CodeForbidden, "")
		requireError(t, b.request(t, http.MethodPost, "/control/evict_pool", "admin", `{}`), http.StatusBadRequest, CodeInvalidRequest, "pool_id")
		requireError(t, b.request(t, http.MethodPost, "/internal/workers/register", "alice", wire.RegisterWorkerRequest{WorkerID: "w"}), http.StatusForbidden, CodeForbidden, "")
		e := requireError(t, b.request(t, http.MethodPost, "/internal/workers/register", "worker", wire.RegisterWorkerRequest{WorkerID: "bad id"}), http.StatusBadRequest, CodeInvalidRequest, "worker_id")
		require.Equal(t, "must be "+ident.ID.Rule(), e.Message)
		e = requireError(t, b.request(t, http.MethodPost, "/workers/pool", "admin", `{"pool_id":".."}`), http.StatusBadRequest, CodeInvalidRequest, "pool_id")
		require.Equal(t, "must be 1 to 100 of A-Z a-z 0-9 . _ : -, and not . or ..", e.Message)
		requireError(t, b.request(t, http.MethodPost, "/internal/workers/w/heartbeat", "worker", wire.WorkerHeartbeatRequest{Status: "sleeping"}), http.StatusBadRequest, CodeInvalidRequest, "status")
	})

	t.Run("HeartbeatsAndInstructions", func(t *testing.T) {
		t.Parallel()
		b, svc := setupPools(t)
		require.Equal(t, http.StatusCreated, b.request(t, http.MethodPost, "/workers/pool", "admin", mistral).Code)
		rec := b.request(t, http.MethodPost, "/internal/workers/register", "worker", wire.RegisterWorkerRequest{
			WorkerID: "w1", PoolID: "mistral", Types: []string{"noop"}})
		in := decode[wire.WorkerInstruction](t, rec)
		require.Equal(t, wire.InstructionNone, in.Instruction)
		require.Equal(t, svc.HeartbeatInterval(), time.Duration(in.HeartbeatInterval))

		// The pool's own agent keeps it warm; another agent may not.
		require.Equal(t, http.StatusOK, b.request(t, http.MethodPost, "/workers/pools/mistral/heartbeat", "alice", nil).Code)
		requireError(t, b.request(t, http.MethodPost, "/workers/pools/mistral/heartbeat", "bob", nil), http.StatusForbidden, CodeForbidden, "")

		rec = b.request(t, http.MethodPost, "/workers/pools/mistral/drain", "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		change := decode[wire.PoolChange](t, rec)
		require.True(t, change.Changed)
		require.Equal(t, wire.PoolDraining, change.Pool.Status)

		rec = b.request(t, http.MethodPost, "/internal/workers/w1/heartbeat", "worker", wire.WorkerHeartbeatRequest{
			Status: wire.WorkerExecuting, InFlight: 1, JobsClaimed: 1,
			Telemetry: &wire.NodeTelemetry{NodeID: "n1", Source: "simulated", GPUs: []wire.GPUTelemetry{{Index: 0, MemoryTotalMB: 24576}}}})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		in = decode[wire.WorkerInstruction](t, rec)
		require.Equal(t, wire.InstructionDrain, in.Instruction)
		require.Equal(t, wire.PoolDraining, in.PoolStatus)

		rec = b.request(t, http.MethodPost, "/control/evict_pool", "admin", wire.EvictRequest{PoolID: "mistral"})
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, wire.PoolEvicted, decode[wire.PoolChange](t, rec).Pool.Status)
		requireError(t, b.request(t, http.MethodPost, "/workers/pools/mistral/drain", "admin", nil), http.StatusConflict, CodeConflict, "")

		require.Equal(t, http.StatusNoContent, b.request(t, http.MethodPost, "/internal/workers/w1/deregister", "worker", nil).Code)
		requireError(t, b.request(t, http.MethodPost, "/internal/workers/w1/heartbeat", "worker",
			wire.WorkerHeartbeatRequest{Status: wire.WorkerIdle}), http.StatusNotFound, CodeNotFound, "")
	})

	t.Run("ControlDrainAndReconcile", func(t *testing.T) {
		t.Parallel()
		b, svc := setupPools(t)
		for _, id := range []string{"a", "b"} {
			p := mistral
			p.PoolID = id
			require.Equal(t, http.StatusCreated, b.request(t, http.MethodPost, "/workers/pool", "admin", p).Code)
		}
		rec := b.request(t, http.MethodPost, "/control/drain", "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Len(t, decode[wire.DrainAllResponse](t, rec).Drained, 2)

		rec = b.request(t, http.MethodPost, "/control/reconcile", "admin", nil)
		require.Equal(t, http.StatusAccepted, rec.Code)
		require.False(t, decode[wire.ReconcileResponse](t, rec).Triggered, "no reconciler runs here")
		woken := make(chan struct{}, 1)
		svc.SetWaker(func() { woken <- struct{}{} })
		rec = b.request(t, http.MethodPost, "/control/reconcile", "admin", nil)
		require.True(t, decode[wire.ReconcileResponse](t, rec).Triggered)
		<-woken
	})

	t.Run("DisabledWithoutService", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		requireError(t, b.request(t, http.MethodGet, "/workers/pools", "admin", nil), http.StatusServiceUnavailable, CodeUnavailable, "")
	})
}

// TestPoolMetadataVisibility: a pool's metadata is shown to admins and to the agent the pool
// serves (every pool names one); other agents get the pool without it.
func TestPoolMetadataVisibility(t *testing.T) {
	t.Parallel()
	b, _ := setupPools(t)
	alices := mistral
	alices.Metadata = []byte(`{"api_key":"alice-s3cret"}`)
	require.Equal(t, http.StatusCreated, b.request(t, http.MethodPost, "/workers/pool", "admin", alices).Code)
	shared := mistral
	shared.PoolID, shared.AgentName, shared.Metadata = "shared", "carol", []byte(`{"api_key":"shared-s3cret"}`)
	rec := b.request(t, http.MethodPost, "/workers/pool", "admin", shared)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())

	metadataOf := func(who, path string) map[string]string {
		t.Helper()
		out := map[string]string{}
		rec := b.request(t, http.MethodGet, path, who, nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var ps []wire.Pool
		if path == "/workers/pools" {
			ps = decode[wire.PoolList](t, rec).Pools
		} else {
			ps = []wire.Pool{decode[wire.Pool](t, rec)}
		}
		for _, p := range ps {
			out[p.PoolID] = string(p.Metadata)
		}
		return out
	}
	for _, path := range []string{"/workers/pools", "/workers/pools/mistral", "/workers/pools/shared"} {
		admin, alice, bob := metadataOf("admin", path), metadataOf("alice", path), metadataOf("bob", path)
		for id := range admin {
			require.NotEmpty(t, admin[id], "admin sees %s's metadata", id)
		}
		if _, ok := alice["mistral"]; ok {
			require.JSONEq(t, `{"api_key":"alice-s3cret"}`, alice["mistral"], "alice sees her pool's metadata")
			require.Empty(t, bob["mistral"], "bob does not see alice's pool's metadata")
		}
		if _, ok := alice["shared"]; ok {
			require.Empty(t, alice["shared"], "carol's pool: not alice's to read")
			require.Empty(t, bob["shared"])
		}
		body := b.request(t, http.MethodGet, path, "bob", nil).Body.String()
		require.NotContains(t, body, "s3cret")
	}
}
