package pools

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/store"
)

// Lister reads the worker pools and the workers registry; store.Store implements it.
type Lister interface {
	// PoolList returns the pools with one of statuses (every pool when empty).
	PoolList(ctx context.Context, statuses ...store.PoolStatus) ([]store.Pool, error)
	// WorkerList returns every worker when all is true.
	WorkerList(ctx context.Context, poolID string, all bool) ([]store.Worker, error)
}

// workerStatuses are the worker states, pre-created at 0.
var workerStatuses = []store.WorkerStatus{store.WorkerIdle, store.WorkerExecuting, store.WorkerDraining, store.WorkerOffline}

// Collector is the scrape-time collector of the worker pools and the workers registry, read from
// MariaDB: gpu_orchestrator_worker_pools_total{status}, gpu_orchestrator_workers{status}, for
// every pool that is not stopped or evicted gpu_orchestrator_worker_pool_workers{pool_id} (its
// workers that are not offline) and gpu_orchestrator_worker_pool_desired_workers{pool_id}, and
// for every pool gpu_orchestrator_worker_pool_target_workers{pool_id}.
//
// The target is what an autoscaler that owns a pool's replicas (KEDA, through `orchctl pools
// manifest`) scales to: desired_workers while the pool is starting or running, 0 once it
// drains, stops or is evicted, so that the replicas go when the pool does rather than being
// restarted into it. Every pool has the series, so that a missing one means the orchestrator
// could not be read (the autoscaler then keeps the replicas), never "scale to zero".
type Collector struct {
	scrape  *metrics.Scrape
	src     Lister
	pools   *prometheus.Desc
	workers *prometheus.Desc
	live    *prometheus.Desc
	desired *prometheus.Desc
	target  *prometheus.Desc
}

// NewCollector returns the pools collector over src; failures count as collector "pools" on
// reg.
func NewCollector(reg *metrics.Registry, src Lister) *Collector {
	return &Collector{
		scrape: reg.Scrape("pools"), src: src,
		pools:   metrics.NewDesc("worker_pools_total", "Worker pools, by status, read at scrape time.", "status"),
		workers: metrics.NewDesc("workers", "Registered workers, by status (offline: silent past the heartbeat timeout).", "status"),
		live: metrics.NewDesc("worker_pool_workers",
			"Workers of a pool that are not offline, for pools that are starting, running or draining.", "pool_id"),
		desired: metrics.NewDesc("worker_pool_desired_workers",
			"Workers a pool asks for, for pools that are starting, running or draining.", "pool_id"),
		target: metrics.NewDesc("worker_pool_target_workers",
			"Workers a deployment of a pool should run: its desired workers while it is starting or running, 0 once it drains, stops or is evicted; every pool.", "pool_id"),
	}
}

// Describe implements prometheus.Collector.
func (p *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.pools, p.workers, p.live, p.desired, p.target} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (p *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := metrics.ScrapeContext()
	defer cancel()
	pools, err := p.src.PoolList(ctx)
	if err != nil {
		p.scrape.Failed(ch, err, p.pools, p.workers, p.live, p.desired, p.target)
		return
	}
	workers, err := p.src.WorkerList(ctx, "", true)
	if err != nil {
		p.scrape.Failed(ch, err, p.pools, p.workers, p.live, p.desired, p.target)
		return
	}
	byStatus := map[store.PoolStatus]int{}
	for _, pl := range pools {
		byStatus[pl.Status]++
	}
	for _, s := range store.PoolStatuses {
		metrics.Gauge(ch, p.pools, float64(byStatus[s]), string(s))
	}
	wByStatus := map[store.WorkerStatus]int{}
	live := map[string]int{}
	for _, w := range workers {
		wByStatus[w.Status]++
		if w.Status != store.WorkerOffline {
			live[w.PoolID]++
		}
	}
	for _, s := range workerStatuses {
		metrics.Gauge(ch, p.workers, float64(wByStatus[s]), string(s))
	}
	for _, pl := range pools {
		if pl.Status.Live() || pl.Status == store.PoolDraining {
			metrics.Gauge(ch, p.live, float64(live[pl.ID]), pl.ID)
			metrics.Gauge(ch, p.desired, float64(pl.DesiredWorkers), pl.ID)
		}
		target := 0
		if pl.Status.Live() {
			target = pl.DesiredWorkers
		}
		metrics.Gauge(ch, p.target, float64(target), pl.ID)
	}
}
