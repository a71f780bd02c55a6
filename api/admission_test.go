package api

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/admission"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/wire"
)

// admissionTypes: a CPU type, a GPU type whose queue of 1 overflows into a CPU type.
const admissionTypes = `
job_types:
  noop: {}
  infer:
    handler: noop
    gpu_memory_mb: 1000
    queue_limit: 1
    cpu_fallback: infer_cpu
  infer_cpu:
    handler: noop
`

// setupAdmission is the real stack with an admission controller. limiterRedis is the Redis of
// the limiter (nil: the test Redis, like the engine's).
func setupAdmission(t testing.TB, limiterRedis redis.UniversalClient) (*bundle, *admission.Controller) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(admissionTypes), 0o600))
	cfg, err := config.Load(path, func(string) string { return "" })
	require.NoError(t, err)
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testenv.RedisPrefix(t)
	if limiterRedis == nil {
		limiterRedis = rdb
	}
	log := slog.New(slog.DiscardHandler)
	ctl, err := admission.New(st, limiterRedis, cfg, admission.Options{Prefix: prefix, Registerer: prometheus.NewRegistry(), Logger: log})
	require.NoError(t, err)
	// As the orchestrator wires them: the lease manager reads the policies' GPU quotas.
	sc := streams.New(rdb, streams.Options{Prefix: prefix})
	lm := engine.NewLeaseManager(st, cfg, leases.Options{Logger: log, Quotas: ctl.Quota})
	b := &bundle{eng: engine.New(st, sc, cfg, engine.Options{Logger: log, Leases: lm}), st: st, sc: sc, lm: lm, cfg: cfg}
	settleAtEnd(t, b.eng)
	set, tokens := testTokens(t)
	b.srv, b.tokens = New(b.with(Options{Auth: AuthOptions{Tokens: set}, Logger: log, Admission: ctl})), tokens
	return b, ctl
}

func admSubmit(id, typ, agent string) wire.SubmitRequest {
	return wire.SubmitRequest{JobID: id, Type: typ, Agent: agent, Payload: []byte(`{}`)}
}

func ptr[T any](v T) *T { return &v }

func TestSubmitAdmission(t *testing.T) {
	t.Parallel()
	b, ctl := setupAdmission(t, nil)
	rec := b.request(t, http.MethodPut, "/control/admission", "admin",
		wire.AdmissionPolicyUpdate{Agent: "alice", RatePerSec: ptr(0.01), Burst: ptr(1)})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	t.Run("RateLimited", func(t *testing.T) {
		rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", admSubmit("a-1", "noop", ""))
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		rec = b.request(t, http.MethodPost, "/jobs/submit", "alice", admSubmit("a-2", "noop", ""))
		d := requireError(t, rec, http.StatusTooManyRequests, wire.CodeRateLimited, "")
		require.Contains(t, d.Message, "alice")
		retry, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		require.NoError(t, err)
		require.InDelta(t, 100, retry, 1, "0.01 per second: one every 100 s")
		require.Equal(t, 1, b.countJobs(t, "alice"), "nothing written for the rejected job")

		// The same job_id again is a repeat, not a new job: answered with the job.
		rec = b.request(t, http.MethodPost, "/jobs/submit", "alice", admSubmit("a-1", "noop", ""))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

		// Lease requests take from the same bucket.
		rec = b.request(t, http.MethodPost, "/leases", "alice", wire.LeaseRequest{Mode: wire.LeaseModeCPU})
		requireError(t, rec, http.StatusTooManyRequests, wire.CodeRateLimited, "")
		require.NotEmpty(t, rec.Header().Get("Retry-After"))

		// Another agent is unaffected.
		rec = b.request(t, http.MethodPost, "/jobs/submit", "bob", admSubmit("b-1", "noop", ""))
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	})

	t.Run("RoutedToCPUFallback", func(t *testing.T) {
		rec := b.request(t, http.MethodPost, "/jobs/submit", "bob", admSubmit("r-1", "infer", ""))
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		require.Equal(t, wire.SubmitResponse{JobID: "r-1", Status: "pending", Created: true}, decode[wire.SubmitResponse](t, rec))

		rec = b.request(t, http.MethodPost, "/jobs/submit", "bob", admSubmit("r-2", "infer", ""))
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		require.Equal(t, wire.SubmitResponse{JobID: "r-2", Status: "pending", Created: true, Type: "infer_cpu", RoutedFrom: "infer"},
			decode[wire.SubmitResponse](t, rec), "the answer says where the job went")
		job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/r-2", "bob", nil))
		require.Equal(t, "infer_cpu", job.Type)
	})

	t.Run("GPUPressure", func(t *testing.T) {
		snap := telemetry.Snapshot{NodeID: "hot", Source: telemetry.SourceSimulated,
			GPUs: []telemetry.GPU{{Index: 0, UUID: "GPU-hot-0", MemoryTotalMB: 1000, MemoryUsedMB: 990}}}
		require.NoError(t, b.lm.RecordSnapshot(context.Background(), snap))
		require.NoError(t, ctl.Refresh(t.Context()))

		rec := b.request(t, http.MethodPost, "/jobs/submit", "admin", admSubmit("g-1", "infer", "carol"))
		d := requireError(t, rec, http.StatusTooManyRequests, wire.CodeGPUPressure, "")
		require.Contains(t, d.Message, "99.0% used")
		require.Equal(t, "30", rec.Header().Get("Retry-After"), "the hold")
		rec = b.request(t, http.MethodPost, "/leases", "admin", wire.LeaseRequest{Agent: "carol", NodeID: "hot", MinMemoryMB: 1})
		requireError(t, rec, http.StatusTooManyRequests, wire.CodeGPUPressure, "")
		rec = b.request(t, http.MethodPost, "/jobs/submit", "admin", admSubmit("g-2", "noop", "carol"))
		require.Equal(t, http.StatusAccepted, rec.Code, "CPU work goes on: %s", rec.Body.String())

		st := decode[wire.AdmissionStatus](t, b.request(t, http.MethodGet, "/control/admission", "admin", nil))
		require.Equal(t, wire.GateClosed, st.GPU.State)
		require.Equal(t, 99.0, st.GPU.PressurePct)
		require.NotNil(t, st.GPU.HoldUntil)
		require.Len(t, st.GPU.Nodes, 1)
		require.Equal(t, "hot", st.GPU.Nodes[0].NodeID)
	})
}

func TestAdmissionControlRoutes(t *testing.T) {
	t.Parallel()
	b, _ := setupAdmission(t, nil)

	t.Run("AdminOnly", func(t *testing.T) {
		t.Parallel()
		requireError(t, b.request(t, http.MethodGet, "/control/admission", "alice", nil), http.StatusForbidden, CodeForbidden, "")
		requireError(t, b.request(t, http.MethodPut, "/control/admission", "alice",
			wire.AdmissionPolicyUpdate{Agent: "alice", RatePerSec: ptr(1e6)}), http.StatusForbidden, CodeForbidden, "")
		requireError(t, b.request(t, http.MethodDelete, "/control/admission/alice", "worker", nil), http.StatusForbidden, CodeForbidden, "")
		requireError(t, b.request(t, http.MethodGet, "/control/admission", "", nil), http.StatusUnauthorized, CodeUnauthorized, "")
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			body  any
			field string
		}{
			{wire.AdmissionPolicyUpdate{}, "agent"},
			{wire.AdmissionPolicyUpdate{Agent: "no spaces"}, "agent"},
			{wire.AdmissionPolicyUpdate{Agent: "x", RatePerSec: ptr(0.0)}, "rate_per_sec"},
			{wire.AdmissionPolicyUpdate{Agent: "x", Burst: ptr(0)}, "burst"},
			{wire.AdmissionPolicyUpdate{Agent: "x", MaxPending: ptr(-3)}, "max_pending"},
			{wire.AdmissionPolicyUpdate{Agent: "x", MaxGPUs: ptr(-1)}, "max_gpus"},
			{wire.AdmissionPolicyUpdate{Agent: "x", MaxGPUs: ptr(config.AdmissionMaxGPUsMax + 1)}, "max_gpus"},
			{wire.AdmissionPolicyUpdate{Agent: "x", MaxGPUMemoryMB: ptr(int64(-1))}, "max_gpu_memory_mb"},
			{wire.AdmissionPolicyUpdate{Agent: "x", MaxGPUMemoryMB: ptr(int64(81920) << 20)}, "max_gpu_memory_mb"},
			{`{"agent": "x", "rate": 5}`, "rate"},
		} {
			rec := b.request(t, http.MethodPut, "/control/admission", "admin", tc.body)
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Equal(t, tc.field, decode[wire.ErrorBody](t, rec).Error.Field, rec.Body.String())
		}
	})

	t.Run("PutGetDelete", func(t *testing.T) { // not parallel: the default policy is everyone's
		rec := b.request(t, http.MethodPut, "/control/admission", "admin",
			wire.AdmissionPolicyUpdate{Agent: "dave", RatePerSec: ptr(2.5), MaxPending: ptr(10)})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		p := decode[wire.AdmissionPolicy](t, rec)
		require.Equal(t, wire.AdmissionPolicy{Agent: "dave", RatePerSec: 2.5, Burst: 5, MaxPending: 10, Enabled: true,
			UpdatedAt: p.UpdatedAt}, p)
		require.NotNil(t, p.UpdatedAt)

		st := decode[wire.AdmissionStatus](t, b.request(t, http.MethodGet, "/control/admission", "admin", nil))
		require.True(t, st.Enabled)
		require.Equal(t, "config", st.DefaultSource)
		require.Nil(t, st.DefaultPolicy.UpdatedAt)
		require.Contains(t, st.Policies, p)
		require.Equal(t, []wire.AdmissionQueue{{Type: "infer", Limit: 1, CPUFallback: "infer_cpu"}}, st.Queues)
		require.Equal(t, "up", st.Limiter.State)
		require.Equal(t, "closed", st.Limiter.OnDownGPU)
		require.Equal(t, wire.GateOpen, st.GPU.State)

		rec = b.request(t, http.MethodDelete, "/control/admission/dave", "admin", nil)
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		requireError(t, b.request(t, http.MethodDelete, "/control/admission/dave", "admin", nil), http.StatusNotFound, CodeNotFound, "")
	})

	t.Run("DefaultPolicy", func(t *testing.T) { // not parallel: the default policy is everyone's
		rec := b.request(t, http.MethodPut, "/control/admission", "admin",
			wire.AdmissionPolicyUpdate{Agent: wire.AdmissionDefaultAgent, Burst: ptr(20000)})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		st := decode[wire.AdmissionStatus](t, b.request(t, http.MethodGet, "/control/admission", "admin", nil))
		require.Equal(t, "table", st.DefaultSource)
		require.Equal(t, 20000, st.DefaultPolicy.Burst)
		rec = b.request(t, http.MethodDelete, "/control/admission/*", "admin", nil)
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	})
}

func TestAdmissionLimiterDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	down := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	b, ctl := setupAdmission(t, down)
	require.NoError(t, ctl.Refresh(t.Context()), "the limiter's ping failing is its state, not a refresh error")

	// GPU work fails closed with a 503 (a dependency is down), CPU work fails open.
	rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", admSubmit("", "infer", ""))
	requireError(t, rec, http.StatusServiceUnavailable, CodeUnavailable, "")
	require.Equal(t, "5", rec.Header().Get("Retry-After"))
	rec = b.request(t, http.MethodPost, "/jobs/submit", "alice", admSubmit("", "noop", ""))
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())

	rec = b.request(t, http.MethodGet, "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	h := decode[wire.Health](t, rec)
	require.Contains(t, h.Checks[CheckAdmission], "limiter unreachable")
	require.Contains(t, h.Checks[CheckAdmission], "GPU work fails closed")
	require.Equal(t, "ok", h.Checks[CheckRedis], "the engine's Redis is up; only the limiter's is down")

	st := decode[wire.AdmissionStatus](t, b.request(t, http.MethodGet, "/control/admission", "admin", nil))
	require.Equal(t, "down", st.Limiter.State)
	require.NotNil(t, st.Limiter.DownSince)
}

func TestAdmissionNotRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	requireError(t, b.request(t, http.MethodGet, "/control/admission", "admin", nil), http.StatusNotFound, CodeNotFound, "")
	rec := b.request(t, http.MethodGet, "/readyz", "", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	_, present := decode[wire.Health](t, rec).Checks[CheckAdmission]
	require.False(t, present)
}

// TestLeaseQuota: a gpu lease that would take its agent past the GPU quota of its admission
// policy is refused 429 quota with Retry-After, naming the limit and the holding; the policy
// change is audited with the quota; other agents and cpu leases are not limited.
func TestLeaseQuota(t *testing.T) {
	t.Parallel()
	b, _ := setupAdmission(t, nil)
	ctx := context.Background()
	snap := telemetry.Snapshot{NodeID: "n", Source: telemetry.SourceSimulated, GPUs: []telemetry.GPU{
		{Index: 0, UUID: "GPU-n-0", MemoryTotalMB: 81920, MemoryFreeMB: 81920},
		{Index: 1, UUID: "GPU-n-1", MemoryTotalMB: 81920, MemoryFreeMB: 81920}}}
	require.NoError(t, b.lm.RecordSnapshot(ctx, snap))

	rec := b.request(t, http.MethodPut, "/control/admission", "admin",
		wire.AdmissionPolicyUpdate{Agent: "alice", MaxGPUs: ptr(1), MaxGPUMemoryMB: ptr(int64(50000))})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	p := decode[wire.AdmissionPolicy](t, rec)
	require.Equal(t, 1, p.MaxGPUs)
	require.EqualValues(t, 50000, p.MaxGPUMemoryMB)
	evs, err := b.st.AuditList(ctx, store.AuditListParams{Limit: 100})
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1]
	require.Equal(t, admission.EventPolicySet, last.EventType)
	require.Contains(t, string(last.Details), `"max_gpus":1`)
	require.Contains(t, string(last.Details), `"max_gpu_memory_mb":50000`)

	rec = b.request(t, http.MethodPost, "/leases", "alice", wire.LeaseRequest{NodeID: "n", MinMemoryMB: 60000})
	e := requireError(t, rec, http.StatusTooManyRequests, wire.CodeQuota, "")
	require.Equal(t, `agent "alice" holds 0 of 50000 MB of GPU memory (max_gpu_memory_mb); this lease needs 60000 MB`, e.Message)
	require.Equal(t, "5", rec.Header().Get("Retry-After"))

	rec = b.request(t, http.MethodPost, "/leases", "alice", wire.LeaseRequest{NodeID: "n", MinMemoryMB: 1000})
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec = b.request(t, http.MethodPost, "/leases", "alice", wire.LeaseRequest{NodeID: "n", MinMemoryMB: 1000})
	e = requireError(t, rec, http.StatusTooManyRequests, wire.CodeQuota, "")
	require.Equal(t, `agent "alice" holds 1 of 1 GPU(s) (max_gpus); this lease needs 1`, e.Message)
	require.Equal(t, "5", rec.Header().Get("Retry-After"))

	rec = b.request(t, http.MethodPost, "/leases", "alice", wire.LeaseRequest{Mode: wire.LeaseModeCPU, MinMemoryMB: 1})
	require.Equal(t, http.StatusCreated, rec.Code, "a cpu lease holds no GPU: %s", rec.Body.String())
	rec = b.request(t, http.MethodPost, "/leases", "bob", wire.LeaseRequest{NodeID: "n", MinMemoryMB: 1000})
	require.Equal(t, http.StatusCreated, rec.Code, "bob has the default policy, without a quota: %s", rec.Body.String())
}
