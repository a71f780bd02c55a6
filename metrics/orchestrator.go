package metrics

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// Orchestrator is the registry of an orchestrator process with its job metrics. It is built in
// two steps because the engine needs the job metrics (engine.Options.Observer) and the
// scrape-time collectors need the engine: NewOrchestrator, then engine.New, then Watch.
type Orchestrator struct {
	*Registry
	// Jobs is the engine's Observer.
	Jobs *Jobs
	cfg  *config.Config
}

// NewOrchestrator returns a registry with the common families and the job metrics of cfg's
// types registered.
func NewOrchestrator(cfg *config.Config, log *slog.Logger) *Orchestrator {
	o := &Orchestrator{Registry: NewRegistry(log), Jobs: NewJobs(cfg.TypeNames()), cfg: cfg}
	o.MustRegister(o.Jobs)
	return o
}

// Sources are what the scrape-time collectors of an orchestrator read. Nil sources leave their
// families out (a tool that has no leader, a store without a workers registry).
type Sources struct {
	// Streams reads the consumer groups' backlogs (*streams.Client).
	Streams GroupStatsReader
	// Leases counts active leases (the store, through store.StatsReader).
	Leases LeaseCounter
	// GPUs lists the GPUs and their reservations (*leases.Manager).
	GPUs GPULister
	// Pools reads the worker pools and workers (the store).
	Pools PoolLister
	// Leader reports the leadership (leader.Elector); nil reports a follower.
	Leader Leadership
	// Extra are collectors built elsewhere: engine.DLQDepthCollector, the reclaimer's metrics,
	// admission's.
	Extra []prometheus.Collector
}

// SourcesOf takes the sources of an orchestrator from its backends: the store, the stream
// client and the lease manager the engine runs on.
func SourcesOf(eng *engine.Engine, st store.Store, sc GroupStatsReader, lm GPULister, leader Leadership) Sources {
	s := Sources{
		Streams: sc,
		GPUs:    lm,
		Pools:   st,
		Leader:  leader,
		Extra:   []prometheus.Collector{eng.DLQDepthCollector()},
	}
	if c, ok := st.(LeaseCounter); ok {
		s.Leases = c
	}
	return s
}

// Watch registers the scrape-time collectors over s. Call it once.
func (o *Orchestrator) Watch(s Sources) error {
	cs := []prometheus.Collector{NewLeader(s.Leader)}
	if s.Streams != nil {
		cs = append(cs, NewQueues(o.Registry, s.Streams, GroupsOf(o.cfg)))
	}
	if s.Leases != nil && s.GPUs != nil {
		cs = append(cs, NewGPUs(o.Registry, s.Leases, s.GPUs, DefaultRequirementMB(o.cfg)))
	}
	if s.Pools != nil {
		cs = append(cs, NewPools(o.Registry, s.Pools))
	}
	cs = append(cs, s.Extra...)
	var errs []error
	for _, c := range cs {
		if err := o.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}
