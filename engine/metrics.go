package engine

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// Metrics are the job counters and histograms. The engine feeds them as its Observer
// (Options.Observer) at each committed transition, so every orchestrator instance counts the
// transitions it made: sum over instances for the cluster's figures.
type Metrics struct {
	metrics.Set
	total   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	wait    *prometheus.HistogramVec
	placed  *prometheus.HistogramVec
}

var _ Observer = (*Metrics)(nil)

// NewMetrics returns unregistered job metrics with the series of every type in types (and
// every status) pre-created at 0.
func NewMetrics(types []string) *Metrics {
	m := &Metrics{
		total: metrics.NewCounterVec("jobs_total",
			"Jobs that entered a status, by type and status: pending counts submits, retries "+
				"and replays; done, failed (an attempt), dead_letter and cancelled count outcomes.", "type", "status"),
		latency: metrics.NewHistogramVec("job_latency_seconds",
			"Run time of a job attempt (start to done, failed or cancelled), by type.", metrics.JobDurationBuckets, "type"),
		wait: metrics.NewHistogramVec("job_wait_seconds",
			"Time from a job becoming available (its submit; for a retry, the end of its "+
				"backoff) to the start of its attempt, by type.", metrics.JobDurationBuckets, "type"),
		placed: metrics.NewHistogramVec("schedule_wait_seconds",
			"Time from a GPU job becoming available (its submit; for a retry, the end of its backoff) "+
				"to its claim with a lease on GPUs that had room, by type: how long GPU jobs wait for room.",
			metrics.JobDurationBuckets, "type"),
	}
	m.Set = metrics.Set{m.total, m.latency, m.wait, m.placed}
	for _, t := range types {
		for _, s := range store.JobStatuses {
			m.total.WithLabelValues(t, string(s))
		}
		m.latency.WithLabelValues(t)
		m.wait.WithLabelValues(t)
		m.placed.WithLabelValues(t)
	}
	return m
}

// ObserveJobs implements Observer.
func (m *Metrics) ObserveJobs(changes []JobChange) {
	for _, c := range changes {
		m.total.WithLabelValues(c.Type, string(c.To)).Inc()
		switch {
		case c.To == store.JobClaimed && c.GPU:
			m.placed.WithLabelValues(c.Type).Observe(c.Placed.Seconds())
		case c.To == store.JobRunning:
			m.wait.WithLabelValues(c.Type).Observe(c.Wait.Seconds())
		case c.From == store.JobRunning:
			m.latency.WithLabelValues(c.Type).Observe(c.Run.Seconds())
		}
	}
}

// StreamLengther reads a stream's length; *streams.Client implements it.
type StreamLengther interface {
	Len(ctx context.Context, stream string) (int64, error)
}

var _ StreamLengther = (*streams.Client)(nil)

// DLQDepthCollector is the scrape-time collector of gpu_orchestrator_dlq_depth: the XLEN of
// the dead-letter stream (the DLQ relay adds entries, replay and purge delete them, the
// trimmer drops them with age).
type DLQDepthCollector struct {
	scrape *metrics.Scrape
	src    StreamLengther
	depth  *prometheus.Desc
}

// NewDLQDepthCollector returns the collector of the DLQ's length read from src; failures
// count as collector "dlq" on reg. Register it once per process.
func NewDLQDepthCollector(reg *metrics.Registry, src StreamLengther) *DLQDepthCollector {
	return &DLQDepthCollector{
		scrape: reg.Scrape("dlq"), src: src,
		depth: metrics.NewDesc("dlq_depth",
			"Entries in the dead-letter stream (stream:orchestrator:dlq), read at scrape time."),
	}
}

// Describe implements prometheus.Collector.
func (c *DLQDepthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.depth }

// Collect implements prometheus.Collector.
func (c *DLQDepthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := metrics.ScrapeContext()
	defer cancel()
	n, err := c.src.Len(ctx, streams.DLQStream)
	if err != nil {
		c.scrape.Failed(ch, err, c.depth)
		return
	}
	metrics.Gauge(ch, c.depth, float64(n))
}
