package metrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// quiet discards the logs of the code under test.
var quiet = slog.New(slog.DiscardHandler)

// bundle is an orchestrator's metrics over a real engine: a fresh MariaDB database and a
// Redis key prefix.
type bundle struct {
	cfg *config.Config
	st  store.Store
	sc  *streams.Client
	eng *engine.Engine
	lm  *leases.Manager
	om  *metrics.Registry
}

// setup builds the scrape-time collectors the way the orchestrator does, over the store, the
// streams client and a lease manager.
func setup(t *testing.T, mutate func(*config.Config)) *bundle {
	t.Helper()
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	if mutate != nil {
		mutate(cfg)
	}
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	lm := engine.NewLeaseManager(st, cfg, nil, quiet)
	eng := engine.New(st, sc, cfg, engine.Options{Logger: quiet, Leases: lm})
	om := metrics.NewRegistry(quiet)
	om.MustRegister(
		metrics.NewQueues(om, sc, metrics.GroupsOf(cfg)),
	)
	return &bundle{cfg: cfg, st: st, sc: sc, eng: eng, lm: lm, om: om}
}

var seq atomic.Int64

func uid(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), seq.Add(1))
}

// submit submits a job of typ and returns it.
func (b *bundle) submit(t *testing.T, typ string) store.Job {
	t.Helper()
	job, created, err := b.eng.Submit(context.Background(), engine.SubmitParams{
		JobID: uid("job"), Type: typ, Agent: "tester", Payload: json.RawMessage(`{}`), Actor: "agent:tester",
	})
	require.NoError(t, err)
	require.True(t, created)
	b.eng.FlushMarks(context.Background()) // as if the mark writer had run
	return job
}

// gather collects g and indexes the families by name.
func gather(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// sample returns the metric of family name whose labels include want, failing when there is
// none.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
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

// value is the value of a gauge or counter sample.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m := sample(t, fams, name, labels)
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// registryOf registers cs on a fresh registry.
func registryOf(t *testing.T, cs ...prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range cs {
		require.NoError(t, reg.Register(c))
	}
	return reg
}
