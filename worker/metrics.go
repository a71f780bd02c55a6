package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/tracing"
	"github.com/gpuorch/orchestrator/wire"
)

// Metrics are a worker process's own metrics: what its handlers ran and how long, and what
// runs now. The queue depths, leases and job counts of the cluster are the orchestrator's.
type Metrics struct {
	reg     *metrics.Registry
	runs    *prometheus.CounterVec
	runTime *prometheus.HistogramVec
	running *prometheus.GaugeVec
}

// NewMetrics returns a worker's registry (the process registry of package metrics, Go and
// process collectors included) with the series of every type in types pre-created at 0.
func NewMetrics(types []string) *Metrics {
	m := &Metrics{
		reg: metrics.NewRegistry(nil),
		runs: metrics.NewCounterVec("worker_jobs_total",
			"Job attempts this worker's handlers ran, by type and result (done or failed).", "type", "result"),
		runTime: metrics.NewHistogramVec("worker_job_run_seconds",
			"Run time of the handlers of this worker, by type.", metrics.JobDurationBuckets, "type"),
		running: metrics.NewGaugeVec("worker_running_jobs", "Handlers running now in this worker, by type.", "type"),
	}
	m.reg.MustRegister(m.runs, m.runTime, m.running)
	for _, t := range types {
		m.runs.WithLabelValues(t, wire.ResultDone)
		m.runs.WithLabelValues(t, wire.ResultFailed)
		m.runTime.WithLabelValues(t)
		m.running.WithLabelValues(t)
	}
	return m
}

// Registry returns the registry, to add collectors to.
func (m *Metrics) Registry() *metrics.Registry { return m.reg }

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler { return m.reg.Handler() }

// ServeMetrics serves h at GET /metrics on addr until ctx ends. It returns once listening (an
// error when it cannot listen) and the address it listens on; the server stops with ctx.
func ServeMetrics(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("serve worker metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("worker metrics server stopped", "component", "worker", "error", err)
		}
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	return ln.Addr().String(), nil
}

// startRun opens the job.run span of r, in the trace its stream entry carried, and counts the
// handler as running.
func (w *Worker) startRun(ctx context.Context, r *run) (context.Context, trace.Span) {
	if m := w.cfg.Metrics; m != nil {
		m.running.WithLabelValues(r.job.Type).Inc()
	}
	parent := ctx
	if len(r.deliveries) > 0 {
		parent = tracing.WithTraceParent(ctx, r.deliveries[0].TraceParent)
	}
	return tracing.Start(parent, "job.run", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		tracing.AttrJobID.String(r.job.ID), tracing.AttrJobType.String(r.job.Type), tracing.AttrAttempt.Int(r.job.Attempt),
		tracing.AttrWorkerID.String(w.cfg.WorkerID), tracing.AttrPoolID.String(w.cfg.PoolID), tracing.AttrNodeID.String(w.cfg.NodeID)))
}

// endRun records the outcome of r's handler (r.result is filled in): it ends the span, hands
// its trace context to the result (the orchestrator's job.complete span joins it), and counts
// the run.
func (w *Worker) endRun(ctx context.Context, span trace.Span, r *run, took time.Duration) {
	r.result.TraceParent = tracing.TraceParent(ctx)
	var err error
	if r.result.Status != wire.ResultDone {
		err = errors.New(r.result.Error)
	}
	tracing.End(span, err)
	if m := w.cfg.Metrics; m != nil {
		m.running.WithLabelValues(r.job.Type).Dec()
		m.runs.WithLabelValues(r.job.Type, r.result.Status).Inc()
		m.runTime.WithLabelValues(r.job.Type).Observe(took.Seconds())
	}
}
