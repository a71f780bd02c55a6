package reclaimer

import (
	"context"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/streams"
)

// GroupStatsReader reads the backlog of consumer groups and lists the node streams of the
// scheduler; *streams.Client implements it.
type GroupStatsReader interface {
	GroupStats(ctx context.Context, refs []Group) ([]streams.GroupStat, error)
	NodeStreams(ctx context.Context) ([]string, error)
}

// UnplacedCounter counts, by type, the GPU jobs waiting for the scheduler, in no stream yet;
// store.Store implements it.
type UnplacedCounter interface {
	JobCountUnplaced(ctx context.Context) (map[string]int, error)
}

var _ GroupStatsReader = (*streams.Client)(nil)

// QueueCollector is the scrape-time collector of the job streams' backlogs:
// gpu_orchestrator_job_queue_depth{stream} (the group's lag: entries no worker has read yet,
// what KEDA scales on) and gpu_orchestrator_job_pending_entries{stream} (read, not yet
// acknowledged). One pipelined XINFO GROUPS per scrape (and, where the lag Redis reports
// cannot be trusted, a bounded count of the undelivered entries: streams.GroupStats). A type's
// backlog includes its node streams (the jobs the scheduler placed) and, with an
// UnplacedCounter, its GPU jobs waiting for the scheduler: a pool scaled to zero must see the
// GPU jobs that wait for a worker of it to exist.
type QueueCollector struct {
	scrape   *metrics.Scrape
	src      GroupStatsReader
	groups   []Group
	unplaced UnplacedCounter
	typeOf   map[string]string // group → its stream's type
	depth    *prometheus.Desc
	pel      *prometheus.Desc
}

// NewQueueCollector returns the collector of groups' backlogs (GroupsOf) read from src, and
// of the GPU jobs unplaced counts (nil: none) of the types of cfg; failures count as collector
// "queues" on reg.
func NewQueueCollector(reg *metrics.Registry, src GroupStatsReader, cfg *config.Config, unplaced UnplacedCounter) *QueueCollector {
	groups := GroupsOf(cfg)
	typeOf := make(map[string]string, len(groups))
	for _, name := range cfg.TypeNames() {
		typeOf[streams.GroupName(name)] = name
	}
	return &QueueCollector{
		scrape: reg.Scrape("queues"), src: src, groups: groups, unplaced: unplaced, typeOf: typeOf,
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
	nodes, err := q.src.NodeStreams(ctx)
	if err != nil {
		q.scrape.Failed(ch, err, q.depth, q.pel)
		return
	}
	stats, err := q.src.GroupStats(ctx, slices.Concat(q.groups, NodeGroups(q.groups, nodes)))
	if err != nil {
		q.scrape.Failed(ch, err, q.depth, q.pel)
		return
	}
	var waiting map[string]int
	if q.unplaced != nil {
		if waiting, err = q.unplaced.JobCountUnplaced(ctx); err != nil {
			q.scrape.Failed(ch, err, q.depth, q.pel)
			return
		}
	}
	depth, pel := map[string]int64{}, map[string]int64{}
	for _, g := range q.groups {
		depth[g.Stream] = int64(waiting[q.typeOf[g.Group]])
	}
	for _, s := range stats {
		stream := streams.TypeStream(s.Stream)
		depth[stream] += s.Lag
		pel[stream] += s.Pending
	}
	for _, g := range q.groups {
		metrics.Gauge(ch, q.depth, float64(depth[g.Stream]), g.Stream)
		metrics.Gauge(ch, q.pel, float64(pel[g.Stream]), g.Stream)
	}
}
