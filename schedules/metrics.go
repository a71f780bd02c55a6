package schedules

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/metrics"
)

// Metrics are the firer's: the fires that made a job, by schedule; the skipped fire times, by
// reason; the lag from a fire time to its job's creation; failed passes. Only the leader's
// firer counts.
type Metrics struct {
	metrics.Set
	fires    *prometheus.CounterVec
	skips    *prometheus.CounterVec
	lag      prometheus.Histogram
	failures prometheus.Counter
}

// NewMetrics returns unregistered schedule metrics, every skip reason's series at 0.
func NewMetrics() *Metrics {
	m := &Metrics{
		fires: metrics.NewCounterVec("schedule_fires_total",
			"Schedule fires the leader made that created their job (on time, caught up or dequeued; manual triggers aside), by schedule.", "schedule"),
		skips: metrics.NewCounterVec("schedule_skips_total",
			"Schedule fire times that created no job, by reason (missed, catch_up_max, overlap, queue_full, "+
				"previous_running, previous_failed, invalid_job).", "reason"),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metrics.Namespace, Name: "schedule_fire_lag_seconds",
			Help:    "Time from a schedule's fire time to the creation of its job.",
			Buckets: metrics.JobDurationBuckets}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "schedule_failed_passes_total", Help: "Schedule firer passes that failed (logged)."}),
	}
	m.Set = metrics.Set{m.fires, m.skips, m.lag, m.failures}
	for _, r := range SkipReasons {
		m.skips.WithLabelValues(r)
	}
	return m
}

// seen creates the fires series of the schedules a pass looked at.
func (m *Metrics) seen(ids []string) {
	if m == nil {
		return
	}
	for _, id := range ids {
		m.fires.WithLabelValues(id)
	}
}

// observe counts what a transaction did.
func (m *Metrics) observe(o Outcome) {
	if m == nil {
		return
	}
	for _, f := range o.Fired {
		m.fires.WithLabelValues(f.ScheduleID).Inc()
		m.lag.Observe(max(f.Lag.Seconds(), 0))
	}
	for r, n := range o.Skipped {
		m.skips.WithLabelValues(r).Add(float64(n))
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.failures.Inc()
	}
}
