// Package metrics is the Prometheus side of the orchestrator: the process registry and its
// handler, the HTTP metrics of the API, the job counters and histograms the engine feeds
// (engine.Observer), and the scrape-time collectors of everything that lives in Redis or
// MariaDB (queue depths, leases, GPU telemetry, pools, leadership).
//
// Conventions (docs/architecture.md, "Metrics"): every name starts with gpu_orchestrator_; counters end in _total,
// durations are _seconds; every label value that is known up front is pre-created at 0, so a
// rate() or an alert has a series from the first scrape; depths and counts that live in a
// database are read when Prometheus scrapes, never counted by hand. Collectors read through
// small interfaces, so tests and other wirings can feed them.
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

// collectorNames are the label values of gpu_orchestrator_collector_errors_total.
var collectorNames = []string{"queues", "leases", "gpus", "pools"}

// Registry is a process's Prometheus registry with the families every process has: the Go
// runtime and process collectors, the HTTP metrics, and the collector error counter.
type Registry struct {
	*prometheus.Registry
	// HTTP are the metrics of the HTTP API (api.Options.Metrics records them).
	HTTP *HTTP
	// errors counts collector failures; collectors of this package record into it.
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
		HTTP:     NewHTTP(),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "collector_errors_total",
			Help:      "Scrape-time collectors that could not read their source (Redis, MariaDB), by collector.",
		}, []string{"collector"}),
		log: log.With("component", "metrics"),
	}
	for _, c := range collectorNames {
		r.errors.WithLabelValues(c)
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		r.HTTP,
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

// failed records a collector's failure: the counter, a log line, and an invalid metric per
// family so the scrape reports the error.
func (r *Registry) failed(ch chan<- prometheus.Metric, collector string, err error, descs ...*prometheus.Desc) {
	r.errors.WithLabelValues(collector).Inc()
	r.log.Warn("metrics collector failed", "collector", collector, "error", err)
	for _, d := range descs {
		ch <- prometheus.NewInvalidMetric(d, err)
	}
}

// scrapeContext bounds the reads of one collection.
func scrapeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), ScrapeTimeoutDefault)
}

// errorLog adapts slog to promhttp.Logger.
type errorLog struct{ log *slog.Logger }

// Println implements promhttp.Logger.
func (l errorLog) Println(v ...any) { l.log.Warn("serve metrics", "error", fmt.Sprint(v...)) }

// newDesc builds the description of a gauge family of this package.
func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// gauge sends one gauge sample.
func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}
