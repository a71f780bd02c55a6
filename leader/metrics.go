package leader

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/metrics"
)

// Leadership is what the leadership gauges read; every Elector implements it.
type Leadership interface {
	IsLeader() bool
	Term() int64
}

var _ Leadership = Elector(nil)

// Collector is the scrape-time collector of gpu_orchestrator_is_leader (1 on the instance that
// leads) and gpu_orchestrator_leader_term (the term it leads in, 0 on followers: the cluster's
// current term is the max over instances, and sum(is_leader) must be 1).
type Collector struct {
	src    Leadership
	leader *prometheus.Desc
	term   *prometheus.Desc
}

// NewCollector returns the leadership collector; a nil src reports a follower (a process that
// never campaigns, such as a tool).
func NewCollector(src Leadership) *Collector {
	return &Collector{
		src:    src,
		leader: metrics.NewDesc("is_leader", "1 when this orchestrator instance is the leader, else 0."),
		term:   metrics.NewDesc("leader_term", "The leadership term this instance leads in; 0 when it does not lead."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.leader
	ch <- c.term
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	leading, term := false, int64(0)
	if c.src != nil {
		leading, term = c.src.IsLeader(), c.src.Term()
	}
	v := 0.0
	if leading {
		v = 1
	} else {
		term = 0
	}
	metrics.Gauge(ch, c.leader, v)
	metrics.Gauge(ch, c.term, float64(term))
}
