package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/streams"
)

// GroupStatsReader reads the backlog of consumer groups; *streams.Client implements it.
type GroupStatsReader interface {
	GroupStats(ctx context.Context, refs []streams.GroupRef) ([]streams.GroupStat, error)
}

var _ GroupStatsReader = (*streams.Client)(nil)

// GroupsOf returns the consumer group of every configured job type, by type name.
func GroupsOf(cfg *config.Config) []streams.GroupRef {
	names := cfg.TypeNames()
	out := make([]streams.GroupRef, 0, len(names))
	for _, name := range names {
		out = append(out, streams.GroupRef{Stream: cfg.JobTypes[name].Stream, Group: streams.GroupName(name)})
	}
	return out
}

// Queues is the scrape-time collector of the job streams' backlogs:
// gpu_orchestrator_job_queue_depth{stream} (the group's lag: entries no worker has read yet,
// what KEDA scales on) and gpu_orchestrator_job_pending_entries{stream} (read, not yet
// acknowledged). One pipelined XINFO GROUPS per scrape (and, where the lag Redis reports
// cannot be trusted, a bounded count of the undelivered entries: streams.GroupStats).
type Queues struct {
	scrape *Scrape
	src    GroupStatsReader
	groups []streams.GroupRef
	depth  *prometheus.Desc
	pel    *prometheus.Desc
}

// NewQueues returns the collector of groups' backlogs read from src; failures are counted on
// reg.
func NewQueues(reg *Registry, src GroupStatsReader, groups []streams.GroupRef) *Queues {
	return &Queues{
		scrape: reg.Scrape("queues"), src: src, groups: groups,
		depth: NewDesc("job_queue_depth",
			"Entries of a job stream not yet delivered to its consumer group (the group's lag), read at scrape time.", "stream"),
		pel: NewDesc("job_pending_entries",
			"Entries of a job stream delivered to a worker but not yet acknowledged (the group's PEL), read at scrape time.", "stream"),
	}
}

// Describe implements prometheus.Collector.
func (q *Queues) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.depth
	ch <- q.pel
}

// Collect implements prometheus.Collector. A stream or group that does not exist yet reports
// 0: nothing waits on it.
func (q *Queues) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := ScrapeContext()
	defer cancel()
	stats, err := q.src.GroupStats(ctx, q.groups)
	if err != nil {
		q.scrape.Failed(ch, err, q.depth, q.pel)
		return
	}
	for _, s := range stats {
		Gauge(ch, q.depth, float64(s.Lag), s.Stream)
		Gauge(ch, q.pel, float64(s.Pending), s.Stream)
	}
}
