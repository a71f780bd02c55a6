package reclaimer

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/metrics"
)

// Outcomes of an entry that are not settle outcomes (metric label values).
const (
	// OutcomeRescued: the job's lease had expired; the rescue was recorded and the entry acked.
	OutcomeRescued = "rescued"
	// OutcomeRescueFailed: the rescue failed; the entry stays pending for a later pass.
	OutcomeRescueFailed = "rescue_failed"
	// OutcomeDeleted: XAUTOCLAIM reported the entry deleted from the stream; it is acked.
	OutcomeDeleted = "deleted"
)

// Outcomes lists every outcome label of gpu_orchestrator_reclaimed_total.
func Outcomes() []string {
	out := []string{OutcomeRescued, OutcomeRescueFailed, OutcomeDeleted}
	for _, o := range engine.SettleOutcomes {
		if o != engine.SettleRescue { // a rescue ends as rescued or rescue_failed
			out = append(out, string(o))
		}
	}
	return out
}

// Metrics are the counters of the reclaimer and the trimmer. They live as long as the process
// (leaderships come and go), so the wiring creates them once with NewMetrics, registers them,
// and passes them to every Reclaimer and Trimmer it starts.
type Metrics struct {
	metrics.Set
	entries    *prometheus.CounterVec
	recoveries *prometheus.CounterVec
	passErrors *prometheus.CounterVec
	trimmed    prometheus.Counter
}

// NewMetrics returns the metrics with every label value pre-created at 0, for the streams of
// groups (GroupsOf) and of every Reclaimer built with them: pass the groups so that a follower,
// which builds no Reclaimer, exports the series too.
func NewMetrics(groups ...Group) *Metrics {
	m := &Metrics{
		entries: metrics.NewCounterVec("reclaimed_total",
			"Stream entries idle past claim_idle that the reclaimer settled, by stream and outcome.", "stream", "outcome"),
		recoveries: metrics.NewCounterVec("redis_recoveries_total",
			"Times Redis was found to have lost data and every live job was published again, by reason.", "reason"),
		passErrors: metrics.NewCounterVec("maintenance_pass_errors_total",
			"Reclaimer and trimmer passes that failed (logged), by loop.", "loop"),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace,
			Name:      "stream_trimmed_entries_total",
			Help:      "Stream entries deleted by trimming (read and acknowledged by every group, or dead letters past retention).",
		}),
	}
	m.Set = metrics.Set{m.entries, m.recoveries, m.passErrors, m.trimmed}
	for _, r := range []string{engine.RecoveryMarkerMissing, engine.RecoveryRunIDChanged, engine.RecoveryGroupMissing} {
		m.recoveries.WithLabelValues(r)
	}
	for _, l := range []string{"reclaimer", "trimmer"} {
		m.passErrors.WithLabelValues(l)
	}
	m.initStreams(groups)
	return m
}

// initStreams pre-creates every outcome of every group's stream at 0.
func (m *Metrics) initStreams(groups []Group) {
	for _, g := range groups {
		for _, o := range Outcomes() {
			m.entries.WithLabelValues(g.Stream, o)
		}
	}
}

// addEntries counts what one group's reclaim added to the pass's outcomes (after − before).
func (m *Metrics) addEntries(stream string, before, after map[string]int) {
	for o, n := range after {
		if d := n - before[o]; d > 0 {
			m.entries.WithLabelValues(stream, o).Add(float64(d))
		}
	}
}

// loop is the schedule of one of this package's loops (name: its passErrors label): every
// interval ± 10%, staggered at start when stagger, a failed pass counted.
func (m *Metrics) loop(name string, interval time.Duration, stagger bool, log *slog.Logger) startstop.LoopParams {
	p := startstop.Every(interval, stagger, nil, log)
	p.Failed = m.passErrors.WithLabelValues(name).Inc
	return p
}
