// Package metricstest builds, for tests, an orchestrator's metrics wired the way the process
// wires them, over real backends (a fresh MariaDB database and a Redis key prefix): what a
// scrape of a running orchestrator exports. Tests of the API, the dashboards, the alerts and the
// KEDA manifests check their metric names against it. Its helpers (Gather, Sample, Value) read
// what a registry exports, for the tests of every package's metrics; those tests are external
// test packages (package x_test), since this one imports most of the module.
package metricstest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/admission"
	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/reclaimer"
	"github.com/gpuorch/orchestrator/scheduler"
	"github.com/gpuorch/orchestrator/schedules"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/webhooks"
)

// Bundle is a wired orchestrator's engine and metrics.
type Bundle struct {
	Config    *config.Config
	Store     store.Store
	Streams   *streams.Client
	Engine    *engine.Engine
	Leases    *leases.Manager
	Metrics   *metrics.Registry
	Admission *admission.Controller
	// Scheduler is the leader's GPU scheduler over Engine, counted by Metrics (unfenced; not
	// started: Populate runs one pass).
	Scheduler *scheduler.Scheduler
	// API is the API server over Engine, serving Metrics (without tokens: every request but
	// /healthz, /readyz and /metrics is refused).
	API *api.Server
}

// Leader is a fixed leadership.
type Leader struct {
	Leading bool
	TermV   int64
}

// IsLeader implements leader.Leadership.
func (l Leader) IsLeader() bool { return l.Leading }

// Term implements leader.Leadership.
func (l Leader) Term() int64 { return l.TermV }

// New wires an orchestrator's metrics over fresh backends as cmd/orchestrator does: the
// registry, the engine observed by its job metrics, the metrics of every package (the
// scrape-time collectors, the reclaimer's, the scheduler's), admission control and the API,
// which register theirs. The process leads in term 1.
func New(t testing.TB) *Bundle {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testenv.RedisPrefix(t)
	sc := streams.New(rdb, streams.Options{Prefix: prefix})

	reg := metrics.NewRegistry(log)
	jobs := engine.NewMetrics(cfg.TypeNames())
	lm := engine.NewLeaseManager(st, cfg, leases.Options{Logger: log})
	eng := engine.New(st, sc, cfg, engine.Options{Logger: log, Observer: jobs, Leases: lm})
	ac, err := admission.New(st, rdb, cfg, admission.Options{Prefix: prefix, Registerer: reg, Logger: log})
	require.NoError(t, err)
	counter, ok := st.(store.StatsReader)
	require.True(t, ok, "the store counts leases")
	sm := scheduler.NewMetrics(cfg.TypeNames())
	sched := scheduler.New(eng, scheduler.ConfigFrom(cfg, scheduler.Config{Metrics: sm, Logger: log}))
	for _, c := range []prometheus.Collector{
		jobs,
		sm,
		engine.NewDLQDepthCollector(reg, sc),
		reclaimer.NewMetrics(reclaimer.GroupsOf(cfg)...),
		reclaimer.NewQueueCollector(reg, sc, cfg, st),
		leases.NewCollector(reg, counter, lm, leases.DefaultRequirementMB(cfg)),
		pools.NewCollector(reg, st),
		leader.NewCollector(Leader{Leading: true, TermV: 1}),
		schedules.NewMetrics(),
		webhooks.NewMetrics(),
		webhooks.NewCollector(reg, st),
	} {
		require.NoError(t, reg.Register(c))
	}
	srv := api.New(api.Options{Engine: eng, Config: cfg, Store: st, Streams: sc, Leases: lm, Logger: log, Metrics: reg, Admission: ac})
	return &Bundle{Config: cfg, Store: st, Streams: sc, Engine: eng, Leases: lm, Metrics: reg, Admission: ac,
		Scheduler: sched, API: srv}
}

// Populate gives every family a series: a node's GPUs (telemetry), a running pool with a
// worker, and a scheduler pass as the leader runs them. Families whose series are per GPU or
// per pool are empty, and so not exported, until such rows exist (the API's are per route,
// which api.New pre-creates); the scheduler's waiting jobs until the leader's first pass.
func (b *Bundle) Populate(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.Leases.RecordSnapshot(ctx, telemetry.Snapshot{
		NodeID: "node-a", Source: telemetry.SourceSimulated,
		GPUs: []telemetry.GPU{{Index: 0, UUID: "GPU-a0", MemoryTotalMB: 24576, MemoryUsedMB: 2048, UtilizationPct: 10}},
	}))
	now := time.Now().UTC().Truncate(time.Microsecond)
	require.NoError(t, b.Store.PoolInsert(ctx, store.Pool{ID: "pool-a", Agent: "agent-a", Types: []string{"noop"},
		DesiredWorkers: 1, Status: store.PoolRunning, CreatedAt: now, UpdatedAt: now, StartedAt: now, StatusChangedAt: now}))
	require.NoError(t, b.Store.WorkerUpsert(ctx, store.Worker{ID: "worker-a", PoolID: "pool-a", NodeID: "node-a",
		Types: []string{"noop"}, Concurrency: 1, Status: store.WorkerIdle, RegisteredAt: now, LastHeartbeat: now}))
	_, err := b.Scheduler.RunOnce(ctx)
	require.NoError(t, err)
}

// Names gathers the registry and returns the names of the families it exports.
func (b *Bundle) Names(t testing.TB) map[string]bool {
	t.Helper()
	fams, err := b.Metrics.Gather()
	require.NoError(t, err)
	out := make(map[string]bool, len(fams))
	for _, f := range fams {
		out[f.GetName()] = true
	}
	return out
}

// Required are the families the observability issue requires of an orchestrator's /metrics.
var Required = []string{
	"gpu_orchestrator_leases_active",
	"gpu_orchestrator_leases_free",
	"gpu_orchestrator_worker_pools_total",
	"gpu_orchestrator_worker_pool_workers",
	"gpu_orchestrator_job_queue_depth",
	"gpu_orchestrator_job_pending_entries",
	"gpu_orchestrator_gpu_mem_used_pct",
	"gpu_orchestrator_gpu_utilization_pct",
	"gpu_orchestrator_job_latency_seconds",
	"gpu_orchestrator_job_wait_seconds",
	"gpu_orchestrator_jobs_total",
	"gpu_orchestrator_admission_decisions_total",
	"gpu_orchestrator_reclaimed_total",
	"gpu_orchestrator_dlq_depth",
	"gpu_orchestrator_is_leader",
	"gpu_orchestrator_leader_term",
	"gpu_orchestrator_http_requests_total",
	"gpu_orchestrator_http_request_duration_seconds",
}

// Registry registers cs on a fresh registry.
func Registry(t testing.TB, cs ...prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range cs {
		require.NoError(t, reg.Register(c))
	}
	return reg
}

// Gather collects g and indexes the families by name.
func Gather(t testing.TB, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	return byName(fams)
}

// GatherFailing collects g, which must report an error (a scrape-time collector whose source
// is down), and indexes the families it still served by name.
func GatherFailing(t testing.TB, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	require.Error(t, err)
	return byName(fams)
}

// ScrapeErrors is gpu_orchestrator_collector_errors_total{collector} as a further gather of g
// reads it. A gather runs the collectors concurrently, so the counter a gather returns may be
// read before that same gather's failures are counted: read it after the gathers under test.
func ScrapeErrors(t testing.TB, g prometheus.Gatherer, collector string) float64 {
	t.Helper()
	fams, _ := g.Gather() // the failing collectors fail this gather too; the counter is served
	return Value(t, byName(fams), "gpu_orchestrator_collector_errors_total", map[string]string{"collector": collector})
}

func byName(fams []*dto.MetricFamily) map[string]*dto.MetricFamily {
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// Sample returns the series of family name whose labels include want, failing when there is
// none.
func Sample(t testing.TB, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "family %s is exported", name)
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && got[k] == v
		}
		if match {
			return m
		}
	}
	require.Failf(t, "no such series", "%s%v", name, want)
	return nil
}

// Value is the value of the gauge or counter series of family name whose labels include want.
func Value(t testing.TB, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	m := Sample(t, fams, name, want)
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}
