package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/metrics"
)

// waitingReasons are the kinds of reason a pending GPU job waits for (engine.ScheduleResult's
// Waiting keys), each series kept at 0 when none waits for it.
var waitingReasons = []string{"no_capacity", "no_fresh_telemetry", "no_worker", "unsatisfiable", "reserved",
	"node_unknown", "telemetry_stale", "placement_expired", engine.ReasonCordoned, "quota",
	engine.ReasonConstraints, engine.ReasonNoPoolForModel}

// Metrics are the scheduler's: placements by type, the GPU jobs its last pass left waiting by
// reason (set by the leader only), and failed passes.
type Metrics struct {
	metrics.Set
	placements *prometheus.CounterVec
	waiting    *prometheus.GaugeVec
	failures   prometheus.Counter
}

// NewMetrics returns unregistered scheduler metrics, with the series of every type in types.
func NewMetrics(types []string) *Metrics {
	m := &Metrics{
		placements: metrics.NewCounterVec("scheduler_placements_total",
			"GPU jobs the scheduler placed on a node (their lease reserved), by type.", "type"),
		waiting: metrics.NewGaugeVec("scheduler_waiting_jobs",
			"Pending GPU jobs the scheduler's last pass could not place, by the kind of their waiting_reason; "+
				"reported by the leader only.", "reason"),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "scheduler_failed_passes_total", Help: "Scheduler passes that failed (logged)."}),
	}
	m.Set = metrics.Set{m.placements, m.waiting, m.failures}
	for _, t := range types {
		m.placements.WithLabelValues(t)
	}
	return m
}

func (m *Metrics) observe(res engine.ScheduleResult) {
	if m == nil {
		return
	}
	m.placed(res.Placed)
	for _, r := range waitingReasons {
		m.waiting.WithLabelValues(r).Set(float64(res.Waiting[r]))
	}
}

func (m *Metrics) placed(ps []engine.Placement) {
	if m == nil {
		return
	}
	for _, p := range ps {
		m.placements.WithLabelValues(p.Type).Inc()
	}
}

// clear drops the waiting-jobs series: only a running scheduler keeps them true.
func (m *Metrics) clear() {
	if m != nil {
		m.waiting.Reset()
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.failures.Inc()
	}
}
