package leases

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/store"
)

// GPULister lists every node's GPUs with their reservations and freshness; *Manager
// implements it.
type GPULister interface {
	GPUs(ctx context.Context, nodeID string) ([]GPUStatus, error)
}

var _ GPULister = (*Manager)(nil)

// DefaultRequirementMB is the GPU memory a GPU must have free to count in
// gpu_orchestrator_leases_free: the smallest gpu_memory_mb of the configured GPU job types, so
// that a free GPU is one that can take at least one more job; 1 when no type needs a GPU.
func DefaultRequirementMB(cfg *config.Config) int64 {
	var least int64
	for _, t := range cfg.JobTypes {
		if m := int64(t.GPUMemoryMB); m > 0 && (least == 0 || m < least) {
			least = m
		}
	}
	return max(least, 1)
}

// Collector is the scrape-time collector of leases and GPU telemetry, read from MariaDB:
// gpu_orchestrator_leases_active{mode}, gpu_orchestrator_leases_free (GPUs with fresh telemetry
// and room for the default requirement), and per GPU (node_id, gpu_index) the memory used, the
// utilization and the age of the telemetry. A lost GPU reports its age only.
type Collector struct {
	leases    *metrics.Scrape
	gpus      *metrics.Scrape
	counter   store.StatsReader
	lister    GPULister
	minFreeMB int64
	active    *prometheus.Desc
	free      *prometheus.Desc
	memUsed   *prometheus.Desc
	util      *prometheus.Desc
	age       *prometheus.Desc
}

// NewCollector returns the lease and GPU collector: the active leases counted by counter (the
// store itself), the GPUs listed by lister. minFreeMB is the default requirement (see
// DefaultRequirementMB). Failures count as collector "leases" or "gpus" on reg.
func NewCollector(reg *metrics.Registry, counter store.StatsReader, lister GPULister, minFreeMB int64) *Collector {
	gpu := []string{"node_id", "gpu_index"}
	return &Collector{
		leases: reg.Scrape("leases"), gpus: reg.Scrape("gpus"), counter: counter, lister: lister, minFreeMB: max(minFreeMB, 1),
		active: metrics.NewDesc("leases_active", "Active leases, by mode (gpu or cpu), read at scrape time.", "mode"),
		free: metrics.NewDesc("leases_free",
			"GPUs with fresh telemetry and room (total − max(used, reserved) − safety margin) for the smallest GPU job type."),
		memUsed: metrics.NewDesc("gpu_mem_used_pct", "GPU memory used, in percent of the total, as the node last reported it.", gpu...),
		util:    metrics.NewDesc("gpu_utilization_pct", "GPU utilization in percent, as the node last reported it.", gpu...),
		age: metrics.NewDesc("gpu_telemetry_age_seconds",
			"Time since the GPU's telemetry was last received; past leases.telemetry_freshness, placement skips the GPU.", gpu...),
	}
}

// Describe implements prometheus.Collector.
func (g *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.active, g.free, g.memUsed, g.util, g.age} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. The two reads fail independently.
func (g *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := metrics.ScrapeContext()
	defer cancel()
	if counts, err := g.counter.LeaseCountActive(ctx); err != nil {
		g.leases.Failed(ch, err, g.active)
	} else {
		for _, m := range []store.LeaseMode{store.LeaseGPU, store.LeaseCPU} {
			metrics.Gauge(ch, g.active, float64(counts[m]), string(m))
		}
	}
	gpus, err := g.lister.GPUs(ctx, "")
	if err != nil {
		g.gpus.Failed(ch, err, g.free, g.memUsed, g.util, g.age)
		return
	}
	free := 0
	for _, s := range gpus {
		node, idx := s.NodeID, strconv.Itoa(s.Index)
		metrics.Gauge(ch, g.age, s.Age.Seconds(), node, idx)
		if s.Lost {
			continue
		}
		if s.Fresh && s.FreeMB >= g.minFreeMB {
			free++
		}
		if s.MemoryTotalMB > 0 {
			metrics.Gauge(ch, g.memUsed, 100*float64(s.MemoryUsedMB)/float64(s.MemoryTotalMB), node, idx)
		}
		if s.UtilizationPct >= 0 {
			metrics.Gauge(ch, g.util, float64(s.UtilizationPct), node, idx)
		}
	}
	metrics.Gauge(ch, g.free, float64(free))
}
