package metrics

import "github.com/prometheus/client_golang/prometheus"

// Leadership is what the leadership gauges read; leader.Elector implements it.
type Leadership interface {
	IsLeader() bool
	Term() int64
}

// Leader is the scrape-time collector of gpu_orchestrator_is_leader (1 on the instance that
// leads) and gpu_orchestrator_leader_term (the term it leads in, 0 on followers: the cluster's
// current term is the max over instances, and sum(is_leader) must be 1).
type Leader struct {
	src    Leadership
	leader *prometheus.Desc
	term   *prometheus.Desc
}

// NewLeader returns the leadership collector; a nil src reports a follower (a process that
// never campaigns, such as a tool).
func NewLeader(src Leadership) *Leader {
	return &Leader{
		src:    src,
		leader: NewDesc("is_leader", "1 when this orchestrator instance is the leader, else 0."),
		term:   NewDesc("leader_term", "The leadership term this instance leads in; 0 when it does not lead."),
	}
}

// Describe implements prometheus.Collector.
func (l *Leader) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.leader
	ch <- l.term
}

// Collect implements prometheus.Collector.
func (l *Leader) Collect(ch chan<- prometheus.Metric) {
	leading, term := false, int64(0)
	if l.src != nil {
		leading, term = l.src.IsLeader(), l.src.Term()
	}
	v := 0.0
	if leading {
		v = 1
	} else {
		term = 0
	}
	Gauge(ch, l.leader, v)
	Gauge(ch, l.term, float64(term))
}
