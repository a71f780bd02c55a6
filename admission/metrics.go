package admission

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/store"
)

// metrics are the admission metrics, registered on the Registerer of Options.
//
// The agent label is the agent's name when it has a policy of its own and "*" otherwise, so
// the number of series is bounded by the policies an operator wrote, not by the agent names
// clients send; give an agent a policy to see it on its own.
type metrics struct {
	decisions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, c *Controller) (*metrics, error) {
	m := &metrics{decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_orchestrator_admission_decisions_total",
		Help: "Admission decisions on submits and lease requests, by agent (\"*\": agents without a policy of their own), decision and reason.",
	}, []string{"agent", "decision", "reason"})}
	if err := reg.Register(m.decisions); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		// A second controller in one process (tests): count on the registered vector.
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, err
		}
		m.decisions = existing
	}
	// Scrape-time gauges read the controller's state; a second controller's are not
	// registered (the first one's stay).
	gauges := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpu_orchestrator_admission_gpu_memory_pressure_ratio",
			Help: "Cluster GPU memory in use (max of used and reserved) over total, GPUs with fresh telemetry only, as last measured.",
		}, func() float64 { return c.gpu.State().Pressure.Ratio }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpu_orchestrator_admission_gpu_gate_closed",
			Help: "1 while the GPU-pressure gate refuses GPU job types and GPU leases.",
		}, func() float64 { return boolFloat(c.gpu.State().Closed) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpu_orchestrator_admission_limiter_up",
			Help: "1 while Redis answers the token-bucket limiter; 0 while limiter_down_gpu/cpu decide instead.",
		}, func() float64 { return boolFloat(c.limiter.State().Up) }),
	}
	for _, g := range gauges {
		if err := reg.Register(g); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return nil, err
		}
	}
	m.precreate(store.AdmissionDefaultAgent)
	return m, nil
}

// precreate creates every decision and reason of agent's label at 0, so that rates and alerts
// see a series from the start.
func (m *metrics) precreate(agent string) {
	for _, r := range admittedReasons {
		m.decisions.WithLabelValues(agent, DecisionAdmitted, string(r))
	}
	for _, r := range rejectedReasons {
		m.decisions.WithLabelValues(agent, DecisionRejected, string(r))
	}
}

// count records one decision under agent's label.
func (m *metrics) count(label string, d Decision) {
	decision := DecisionRejected
	if d.Admitted {
		decision = DecisionAdmitted
	}
	m.decisions.WithLabelValues(label, decision, string(d.Reason)).Inc()
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
