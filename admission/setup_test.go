package admission

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// testTypes are the job types of the tests: a CPU type, a GPU type without limits, and a GPU
// type whose queue of 2 overflows into a CPU type whose queue holds 1.
const testTypes = `
job_types:
  noop: {}
  gpu:
    handler: noop
    gpu_memory_mb: 1000
  infer:
    handler: noop
    gpu_memory_mb: 1000
    queue_limit: 2
    cpu_fallback: infer_cpu
  infer_cpu:
    handler: noop
    queue_limit: 1
`

// fakeClock is the controller's clock in tests: it moves only when told. (The token bucket
// runs on Redis's clock.)
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// bundle is one controller under test on a fresh database and a Redis key prefix.
type bundle struct {
	c      *Controller
	st     store.Store
	rdb    redis.UniversalClient
	cfg    *config.Config
	reg    *prometheus.Registry
	clock  *fakeClock
	prefix string
}

// loadConfig loads testTypes plus extra YAML with the defaults filled in.
func loadConfig(t testing.TB, extra string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(testTypes+extra), 0o600))
	cfg, err := config.Load(path, func(string) string { return "" })
	require.NoError(t, err)
	if !strings.Contains(extra, "limiter_timeout") {
		// A loaded test machine must not trip the limiter's breaker by being slow.
		cfg.Admission.LimiterTimeout = 5 * time.Second
	}
	return cfg
}

// setup builds a controller on a fresh database and the test Redis. The refresher is not
// started: tests call Refresh when they want the caches reread.
func setup(t testing.TB, extraConfig string) *bundle {
	t.Helper()
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "") // the production client's options
	t.Cleanup(func() { _ = rdb.Close() })
	return newBundle(t, st, rdb, testenv.RedisPrefix(t), loadConfig(t, extraConfig))
}

// newBundle builds a controller over given backends: a second instance of a test shares them.
func newBundle(t testing.TB, st store.Store, rdb redis.UniversalClient, prefix string, cfg *config.Config) *bundle {
	t.Helper()
	b := &bundle{st: st, rdb: rdb, cfg: cfg, reg: prometheus.NewRegistry(),
		clock: &fakeClock{now: time.Now().UTC().Truncate(time.Microsecond)}, prefix: prefix}
	c, err := New(st, rdb, cfg, Options{Prefix: prefix, Registerer: b.reg, Now: b.clock.Now,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	b.c = c
	return b
}

// job decides on a submit without a job id, requiring no error.
func (b *bundle) job(t *testing.T, agent, typ string) Decision {
	t.Helper()
	return b.jobID(t, "", agent, typ)
}

// jobID decides on a submit of job id, requiring no error.
func (b *bundle) jobID(t *testing.T, id, agent, typ string) Decision {
	t.Helper()
	d, err := b.c.AdmitJob(t.Context(), JobRequest{JobID: id, Agent: agent, Type: typ})
	require.NoError(t, err)
	return d
}

// lease decides on a lease request, requiring no error.
func (b *bundle) lease(t *testing.T, agent string, gpu bool) Decision {
	t.Helper()
	d, err := b.c.AdmitLease(t.Context(), LeaseRequest{Agent: agent, GPU: gpu})
	require.NoError(t, err)
	return d
}

// setPolicy stores a policy through the controller.
func (b *bundle) setPolicy(t testing.TB, agent string, rate float64, burst, maxPending int) store.AdmissionPolicy {
	t.Helper()
	p, err := b.c.SetPolicy(t.Context(), PolicyUpdate{Agent: agent, RatePerSec: &rate, Burst: &burst,
		MaxPending: &maxPending, Actor: "admin:test"})
	require.NoError(t, err)
	return p
}

// insertJob writes a pending job of agent and type, as an admitted submit would.
func (b *bundle) insertJob(t testing.TB, id, agent, typ string) store.Job {
	t.Helper()
	j, inserted, err := b.st.JobInsert(t.Context(), store.JobInsertParams{ID: id, Type: typ, Agent: agent,
		Payload: json.RawMessage(`{}`), MaxAttempts: 1, Now: b.clock.Now()})
	require.NoError(t, err)
	require.True(t, inserted)
	return j
}

// refresh runs one refresher pass, requiring success.
func (b *bundle) refresh(t *testing.T) RefreshResult {
	t.Helper()
	res, err := b.c.refresher.runOnce(t.Context())
	require.NoError(t, err)
	return res
}

// decisions reads the decision counter of one label set.
func (b *bundle) decisions(agent, decision string, reason Reason) float64 {
	var m dto.Metric
	if err := b.c.metrics.decisions.WithLabelValues(agent, decision, string(reason)).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func requireAdmitted(t *testing.T, d Decision, reason Reason) {
	t.Helper()
	require.True(t, d.Admitted, "decision: %+v", d)
	require.Equal(t, reason, d.Reason, "decision: %+v", d)
}

func requireRejected(t *testing.T, d Decision, reason Reason) {
	t.Helper()
	require.False(t, d.Admitted, "decision: %+v", d)
	require.Equal(t, reason, d.Reason, "decision: %+v", d)
	require.Positive(t, d.RetryAfter, "decision: %+v", d)
	require.NotEmpty(t, d.Message)
}

// ctxDone is a context that has ended.
func ctxDone() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
