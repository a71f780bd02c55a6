package reclaimer

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/streams"
)

// GroupStatsReader reads the backlog of consumer groups; *streams.Client implements it.
type GroupStatsReader interface {
	GroupStats(ctx context.Context, refs []Group) ([]streams.GroupStat, error)
}

var _ GroupStatsReader = (*streams.Client)(nil)

// QueueCollector is the scrape-time collector of the job streams' backlogs:
// gpu_orchestrator_job_queue_depth{stream} (the group's lag: entries no worker has read yet,
// what KEDA scales on) and gpu_orchestrator_job_pending_entries{stream} (read, not yet
// acknowledged). One pipelined XINFO GROUPS per scrape (and, where the lag Redis reports
// cannot be trusted, a bounded count of the undelivered entries: streams.GroupStats).
type QueueCollector struct {
	scrape *metrics.Scrape
	src    GroupStatsReader
	groups []Group
	depth  *prometheus.Desc
	pel    *prometheus.Desc
}

// NewQueueCollector returns the collector of groups' backlogs (GroupsOf) read from src;
// failures count as collector "queues" on reg.
func NewQueueCollector(reg *metrics.Registry, src GroupStatsReader, groups []Group) *QueueCollector {
	return &QueueCollector{
		scrape: reg.Scrape("queues"), src: src, groups: groups,
		depth: metrics.NewDesc("job_queue_depth",
			"Entries of a job stream not yet delivered to its consumer group (the group's lag), read at scrape time.", "stream"),
		pel: metrics.NewDesc("job_pending_entries",
			"Entries of a job stream delivered to a worker but not yet acknowledged (the group's PEL), read at scrape time.", "stream"),
	}
}

// Describe implements prometheus.Collector.
func (q *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.depth
	ch <- q.pel
}

// Collect implements prometheus.Collector. A stream or group that does not exist yet reports
// 0: nothing waits on it.
func (q *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := metrics.ScrapeContext()
	defer cancel()
	stats, err := q.src.GroupStats(ctx, q.groups)
	if err != nil {
		q.scrape.Failed(ch, err, q.depth, q.pel)
		return
	}
	for _, s := range stats {
		metrics.Gauge(ch, q.depth, float64(s.Lag), s.Stream)
		metrics.Gauge(ch, q.pel, float64(s.Pending), s.Stream)
	}
}
