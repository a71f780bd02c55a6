package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

// failingHandler fails every job.
type failingHandler struct{}

func (failingHandler) Run(context.Context, Job) (json.RawMessage, error) {
	return nil, errors.New("boom")
}

func TestWorkerMetricsEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("noop", NoopHandler{})
	b.reg.Register("fail", failingHandler{})
	m := NewMetrics([]string{"noop", "fail", "idle"})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := ServeMetrics(ctx, "127.0.0.1:0", m.Handler(), testLogger())
	require.NoError(t, err)

	oks, fails := jobIDs("ok", 3), jobIDs("ko", 2)
	b.publish(t, "noop", "noop", `{}`, oks...)
	b.publish(t, "fail", "fail", `{}`, fails...)
	cfg := b.cfg(jobType("noop", "noop"), jobType("fail", "fail"))
	cfg.Metrics = m
	_, stop := b.start(t, cfg)
	require.Eventually(t, func() bool { return b.api.resultCount() == len(oks)+len(fails) }, 20*time.Second, 5*time.Millisecond)
	stop()

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)

	runs := map[[2]string]float64{}
	for _, s := range fams["gpu_orchestrator_worker_jobs_total"].GetMetric() {
		runs[[2]string{s.GetLabel()[0].GetValue(), s.GetLabel()[1].GetValue()}] = s.GetCounter().GetValue()
	}
	require.Equal(t, map[[2]string]float64{
		{wire.ResultDone, "noop"}: 3, {wire.ResultFailed, "noop"}: 0,
		{wire.ResultDone, "fail"}: 0, {wire.ResultFailed, "fail"}: 2,
		{wire.ResultDone, "idle"}: 0, {wire.ResultFailed, "idle"}: 0,
	}, runs, "labels sort as result, type")
	for _, s := range fams["gpu_orchestrator_worker_running_jobs"].GetMetric() {
		require.Zero(t, s.GetGauge().GetValue(), "nothing runs after the drain")
	}
	require.Len(t, fams["gpu_orchestrator_worker_job_run_seconds"].GetMetric(), 3)
	require.Contains(t, fams, "go_goroutines")

	// The trace context of every result is empty: no span was recording.
	b.api.mu.Lock()
	defer b.api.mu.Unlock()
	require.Empty(t, b.api.results[oks[0]].TraceParent)
}

func TestServeMetricsPortTaken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := ServeMetrics(ctx, "127.0.0.1:0", NewMetrics(nil).Handler(), testLogger())
	require.NoError(t, err)
	_, err = ServeMetrics(ctx, addr, NewMetrics(nil).Handler(), testLogger())
	require.ErrorContains(t, err, "listen on "+addr)
}
