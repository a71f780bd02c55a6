// Package metrics is what every package's metrics share: the process registry and its
// handler, the failure reporting of scrape-time collectors
// (gpu_orchestrator_collector_errors_total), the naming helpers and the shared buckets. It
// imports nothing of this module, so any package can use it.
//
// Conventions (docs/architecture.md, "Metrics"): every name starts with gpu_orchestrator_
// (Namespace; NewDesc, NewCounterVec, NewGaugeVec and NewHistogramVec prefix it); counters end
// in _total, durations are _seconds; every label value that is known up front is pre-created
// at 0, so a rate() or an alert has a series from the first scrape; depths and counts that
// live in Redis or the database are read when Prometheus scrapes, by collectors that read
// through small interfaces, are bounded by ScrapeContext and report a source they cannot read
// with Registry.Scrape, never counted by hand.
//
// Each package defines its metrics next to the code they measure, as a Metrics type (event
// metrics, embedding a Set) or a Collector constructor (scrape-time state): engine.Metrics
// and engine.NewDLQDepthCollector, reclaimer.Metrics and reclaimer.NewQueueCollector,
// leases.NewCollector, pools.NewCollector, leader.NewCollector, api.Metrics, admission's,
// worker.Metrics. The process wiring in cmd/ registers them (cmd/orchestrator/metrics.go; api.New
// and admission.New register theirs on the registry they are given), and metricstest wires
// the same set for the tests.
package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric of the project.
const Namespace = "gpu_orchestrator"

// ScrapeTimeoutDefault bounds the reads of one scrape-time collector: a dependency slower than
// this reports an error for its families rather than holding the whole scrape.
const ScrapeTimeoutDefault = 3 * time.Second

// JobDurationBuckets are the buckets of the histograms of job wait and run times, in seconds:
// from 10 ms (a no-op job on an idle cluster) to two hours (a long training step). The
// orchestrator's and the workers' histograms share them, so that they can be compared.
var JobDurationBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200}

// Registry is a process's Prometheus registry with the families every process has: the Go
// runtime and process collectors, and the collector error counter.
type Registry struct {
	*prometheus.Registry
	// errors counts collector failures (Scrape.Failed); each collector's label is created by
	// Registry.Scrape.
	errors *prometheus.CounterVec
	log    *slog.Logger
}

// NewRegistry returns a fresh registry (not the global default one, so tests and embedded
// processes never collide) with the common families registered.
func NewRegistry(log *slog.Logger) *Registry {
	if log == nil {
		log = slog.Default()
	}
	reg := prometheus.NewRegistry()
	r := &Registry{
		Registry: reg,
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "collector_errors_total",
			Help:      "Scrape-time collectors that could not read their source (Redis, MariaDB), by collector.",
		}, []string{"collector"}),
		log: log.With("component", "metrics"),
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		r.errors,
	)
	return r
}

// Handler serves the registry in the Prometheus text (or OpenMetrics) format. A collector
// that fails does not fail the scrape: its error is logged and counted, the other families are
// served.
func (r *Registry) Handler() http.Handler {
	return promhttp.InstrumentMetricHandler(r.Registry, promhttp.HandlerFor(r.Registry, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		ErrorLog:          errorLog{r.log},
		Registry:          r.Registry,
		EnableOpenMetrics: true,
	}))
}

// Scrape is how one scrape-time collector reports a source it could not read. Get one from
// Registry.Scrape.
type Scrape struct {
	collector string
	errors    *prometheus.CounterVec
	log       *slog.Logger
}

// Scrape returns the scrape helper of the collector named collector: its value of the
// collector label of gpu_orchestrator_collector_errors_total, pre-created at 0 now. On a nil
// registry a failure only marks its families invalid.
func (r *Registry) Scrape(collector string) *Scrape {
	s := &Scrape{collector: collector}
	if r != nil {
		s.errors, s.log = r.errors, r.log
		r.errors.WithLabelValues(collector)
	}
	return s
}

// Failed records a failure to read the source of descs: the counter, a log line, and an
// invalid metric per family, so that the scrape reports the error and serves the other
// families.
func (s *Scrape) Failed(ch chan<- prometheus.Metric, err error, descs ...*prometheus.Desc) {
	if s.errors != nil {
		s.errors.WithLabelValues(s.collector).Inc()
	}
	if s.log != nil {
		s.log.Warn("metrics collector failed", "collector", s.collector, "error", err)
	}
	for _, d := range descs {
		ch <- prometheus.NewInvalidMetric(d, err)
	}
}

// ScrapeContext bounds the reads of one collection by ScrapeTimeoutDefault.
func ScrapeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), ScrapeTimeoutDefault)
}

// errorLog adapts slog to promhttp.Logger.
type errorLog struct{ log *slog.Logger }

// Println implements promhttp.Logger.
func (l errorLog) Println(v ...any) { l.log.Warn("serve metrics", "error", fmt.Sprint(v...)) }

// NewDesc describes a family read at scrape time: gpu_orchestrator_<name>.
func NewDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// Gauge sends one gauge sample of d.
func Gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// NewCounterVec returns the counter family gpu_orchestrator_<name> (name ends in _total).
func NewCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

// NewGaugeVec returns the gauge family gpu_orchestrator_<name>.
func NewGaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

// NewHistogramVec returns the histogram family gpu_orchestrator_<name> (name ends in _seconds
// for a duration).
func NewHistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
}

// Set is a collector made of collectors. A package's Metrics type embeds one holding its
// families and is registered as a whole.
type Set []prometheus.Collector

// Describe implements prometheus.Collector.
func (s Set) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (s Set) Collect(ch chan<- prometheus.Metric) {
	for _, c := range s {
		c.Collect(ch)
	}
}
