package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// Jobs are the job counters and histograms. The engine feeds them through engine.Observer at
// each committed transition, so every orchestrator instance counts the transitions it made:
// sum over instances for the cluster's figures.
type Jobs struct {
	total   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	wait    *prometheus.HistogramVec
}

var _ engine.Observer = (*Jobs)(nil)

// NewJobs returns unregistered job metrics with the series of every type in types (and every
// status) pre-created at 0.
func NewJobs(types []string) *Jobs {
	j := &Jobs{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "jobs_total",
			Help: "Jobs that entered a status, by type and status: pending counts submits, retries " +
				"and replays; done, failed (an attempt), dead_letter and cancelled count outcomes.",
		}, []string{"type", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "job_latency_seconds",
			Help:      "Run time of a job attempt (start to done, failed or cancelled), by type.",
			Buckets:   JobDurationBuckets,
		}, []string{"type"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "job_wait_seconds",
			Help: "Time from a job becoming available (its submit; for a retry, the end of its " +
				"backoff) to the start of its attempt, by type.",
			Buckets: JobDurationBuckets,
		}, []string{"type"}),
	}
	for _, t := range types {
		for _, s := range store.JobStatuses {
			j.total.WithLabelValues(t, string(s))
		}
		j.latency.WithLabelValues(t)
		j.wait.WithLabelValues(t)
	}
	return j
}

// ObserveJobs implements engine.Observer.
func (j *Jobs) ObserveJobs(changes []engine.JobChange) {
	for _, c := range changes {
		j.total.WithLabelValues(c.Type, string(c.To)).Inc()
		switch {
		case c.To == store.JobRunning:
			j.wait.WithLabelValues(c.Type).Observe(c.Wait.Seconds())
		case c.From == store.JobRunning:
			j.latency.WithLabelValues(c.Type).Observe(c.Run.Seconds())
		}
	}
}

// Describe implements prometheus.Collector.
func (j *Jobs) Describe(ch chan<- *prometheus.Desc) {
	j.total.Describe(ch)
	j.latency.Describe(ch)
	j.wait.Describe(ch)
}

// Collect implements prometheus.Collector.
func (j *Jobs) Collect(ch chan<- prometheus.Metric) {
	j.total.Collect(ch)
	j.latency.Collect(ch)
	j.wait.Collect(ch)
}
