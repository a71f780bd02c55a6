// Package admission decides whether a submit (POST /jobs/submit) or a lease request (POST
// /leases) may enter the cluster, before anything is written for it.
//
// Three checks, cheapest first, so that a request refused by a gate costs no token:
//
//  1. The GPU-pressure gate (GPUGate): while the cluster's GPU memory is near full, GPU job
//     types and GPU leases are refused (gpu_pressure), with hysteresis and a hold period.
//  2. The queue-depth gate of the job's type (queue_limit): a full queue sends the job to the
//     type's cpu_fallback when it has one (the response says so), or refuses it (queue_full).
//  3. The agent's policy: its cap on unfinished jobs (max_pending, one bounded count query)
//     and its token bucket (rate_per_sec, burst): a GCRA in Redis shared by every
//     orchestrator instance (Limiter), so N instances admit an agent's rate once, not N times.
//
// The gates and the policies are read from the database once per refresh interval by every
// instance (Refresher), never per request: a decision costs at most one Redis round trip (an
// agent of 100/s or more takes its tokens in batches: tokenStash), plus one count query for an
// agent with a max_pending. When Redis does not answer, the bucket is
// skipped and the request admitted or refused as admission.limiter_down_gpu / _cpu say
// (default: refuse GPU work, admit the rest), which the logs and /readyz report.
package admission

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/store"
)

// RetryAfterLimiterDown is the Retry-After of a request refused because the limiter is down.
const RetryAfterLimiterDown = 5 * time.Second

// Options are the optional dependencies of New.
type Options struct {
	// Prefix is the cluster's Redis key prefix (config redis_prefix).
	Prefix string
	// Registerer receives the metrics (default prometheus.DefaultRegisterer).
	Registerer prometheus.Registerer
	// Now is the clock of the gates and of policy timestamps (default time.Now); the token
	// bucket runs on Redis's clock.
	Now func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Controller makes admission decisions. It is safe for concurrent use; Start begins the
// refresh of its caches, which the decisions read.
type Controller struct {
	cfg       config.Admission
	types     map[string]*config.JobType
	freshness time.Duration
	store     store.Store
	limiter   *Limiter
	unwritten *unwritten
	policies  *policyCache
	gpu       *GPUGate
	queues    *queueGate
	refresher *Refresher
	metrics   *metrics
	now       func() time.Time
	log       *slog.Logger
}

// New builds a controller from the configuration's admission section and job types. The
// configuration must have been validated (config.Load does).
func New(st store.Store, rdb redis.UniversalClient, cfg *config.Config, opts Options) (*Controller, error) {
	if st == nil || rdb == nil || cfg == nil {
		return nil, errors.New("new admission controller: store, redis and config are required")
	}
	log := logging.Component(opts.Logger, "admission")
	a := cfg.Admission
	limits := map[string]int{}
	for name, t := range cfg.JobTypes {
		if t.QueueLimit > 0 {
			limits[name] = t.QueueLimit
		}
	}
	c := &Controller{
		cfg:       a,
		types:     cfg.JobTypes,
		freshness: cmp.Or(cfg.Leases.TelemetryFreshness, config.LeaseTelemetryFreshnessDefault),
		store:     st,
		limiter:   NewLimiter(rdb, opts.Prefix, cmp.Or(a.LimiterTimeout, config.AdmissionLimiterTimeoutDefault), log),
		unwritten: &unwritten{n: map[string]int{}},
		policies:  newPolicyCache(a.DefaultPolicy),
		gpu:       NewGPUGate(a.GPUHighWatermarkPct, a.GPULowWatermarkPct, a.GPUHold),
		queues:    newQueueGate(limits),
		now:       opts.Now,
		log:       log,
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.refresher = newRefresher(c, cmp.Or(a.RefreshInterval, config.AdmissionRefreshIntervalDefault))
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	m, err := newMetrics(reg, c)
	if err != nil {
		return nil, fmt.Errorf("new admission controller: register metrics: %w", err)
	}
	c.metrics = m
	return c, nil
}

// Start loads the caches once (a failure is logged: the configured default policy and open
// gates apply until a refresh succeeds) and starts the refresher. It returns at once after
// that first load.
func (c *Controller) Start(ctx context.Context) error {
	if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
		c.log.Warn("first admission refresh failed; retrying every refresh interval", "error", err)
	}
	return c.refresher.Start(ctx)
}

// Stop stops the refresher. Idempotent, safe before Start.
func (c *Controller) Stop() { c.refresher.Stop() }

// AdmitJob decides on a submit. An error means the decision could not be made (the database
// did not answer the max_pending count, or ctx ended) and nothing was admitted.
func (c *Controller) AdmitJob(ctx context.Context, r JobRequest) (Decision, error) {
	jt := c.types[r.Type]
	if jt == nil {
		// Not ours to refuse: the submit's validation names the unknown type.
		return admit(ReasonOK, r.Type), nil
	}
	pol, own := c.policies.lookup(r.Agent)
	label := labelOf(r.Agent, own)
	d, err := c.decideJob(ctx, r, jt, pol)
	if err != nil {
		return Decision{}, err
	}
	if !d.Admitted && r.JobID != "" && !r.IDGenerated {
		if dup, ok := c.duplicate(ctx, r); ok {
			d = dup
		}
	}
	c.metrics.count(label, d)
	return d, nil
}

// decideJob runs the checks of a submit in order: GPU gate, queue gate (and fallback),
// max_pending, token bucket. A place taken in a queue is given back when a later check refuses.
func (c *Controller) decideJob(ctx context.Context, r JobRequest, jt *config.JobType, pol store.AdmissionPolicy) (Decision, error) {
	if c.cfg.Disabled {
		return admit(ReasonDisabled, r.Type), nil
	}
	gpu := jt.GPUMemoryMB > 0 || r.GPU
	if gpu {
		if d, closed := c.gpuGate(); closed {
			return d, nil
		}
	}
	typ, routedFrom := r.Type, ""
	if !c.queues.tryAdmit(typ, r.JobID) {
		fb := c.types[jt.CPUFallback]
		if fb == nil || !c.queues.tryAdmit(fb.Name, r.JobID) {
			msg := fmt.Sprintf("the queue of job type %s is full (queue_limit %d)", r.Type, jt.QueueLimit)
			if fb != nil {
				msg += fmt.Sprintf(", and so is the queue of its cpu_fallback %s (queue_limit %d)", fb.Name, fb.QueueLimit)
			}
			return reject(ReasonQueueFull, c.cfg.RefreshInterval, "%s", msg), nil
		}
		typ, routedFrom, gpu = fb.Name, r.Type, false
	}
	d, err := c.decidePolicy(ctx, r.Agent, pol, gpu, true)
	if err != nil || !d.Admitted {
		c.queues.finish(typ, r.JobID, false)
		return d, err
	}
	if routedFrom != "" {
		d.Reason = ReasonCPUFallback // the most telling reason of an admission that moved the job
	}
	d.Type, d.RoutedFrom = typ, routedFrom
	if c.queues.limited(typ) {
		d.queued, d.queuedID = typ, r.JobID
	}
	return d, nil
}

// Finished tells the gates what became of an admitted submit: pending reports that the
// submit left a pending job of its id (a new one, or the existing job of a repeated job_id
// that is still pending); false for an error or an existing job past pending. An admitted
// submit of a type with a queue_limit holds a place in its queue until then, and one of an
// agent with a max_pending a place under it, so every admitted Decision of AdmitJob must be
// finished; for other decisions it does nothing.
func (c *Controller) Finished(d Decision, pending bool) {
	if d.queued != "" {
		c.queues.finish(d.queued, d.queuedID, pending)
	}
	if d.unwritten != "" {
		c.unwritten.release(d.unwritten)
	}
}

// unwritten counts, per agent, the submits that max_pending admitted and that are not written
// yet (Controller.Finished): the count query cannot see them, and without them the jobs of one
// batch, or concurrent submits, would all pass against the same count. A written job is in
// both the count and here until its submit finishes, which errs towards refusing. Other
// instances' submits are seen once written. Safe for concurrent use.
type unwritten struct {
	mu sync.Mutex
	n  map[string]int
}

// take holds a place for one more job of agent, whose written unfinished jobs number counted:
// false, holding nothing, when that would pass limit.
func (u *unwritten) take(agent string, counted, limit int) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if counted+u.n[agent] >= limit {
		return false
	}
	u.n[agent]++
	return true
}

// release gives back a place taken by take.
func (u *unwritten) release(agent string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n[agent]--; u.n[agent] <= 0 {
		delete(u.n, agent)
	}
}

// AdmitLease decides on a lease request: the GPU gate for a gpu lease, then the agent's token
// bucket (max_pending counts jobs, not leases).
func (c *Controller) AdmitLease(ctx context.Context, r LeaseRequest) (Decision, error) {
	pol, own := c.policies.lookup(r.Agent)
	d, err := c.decideLease(ctx, r, pol)
	if err != nil {
		return Decision{}, err
	}
	c.metrics.count(labelOf(r.Agent, own), d)
	return d, nil
}

func (c *Controller) decideLease(ctx context.Context, r LeaseRequest, pol store.AdmissionPolicy) (Decision, error) {
	if c.cfg.Disabled {
		return admit(ReasonDisabled, ""), nil
	}
	if r.GPU {
		if d, closed := c.gpuGate(); closed {
			return d, nil
		}
	}
	return c.decidePolicy(ctx, r.Agent, pol, r.GPU, false)
}

// gpuGate returns the rejection of GPU work while the GPU gate is closed.
func (c *Controller) gpuGate() (Decision, bool) {
	closed, holdLeft := c.gpu.Closed(c.now())
	if !closed {
		return Decision{}, false
	}
	st := c.gpu.State()
	return reject(ReasonGPUPressure, max(holdLeft, c.cfg.RefreshInterval),
		"cluster GPU memory is %.1f%% used (gate closed above %.0f%%, reopens below %.0f%% after a hold of %s)",
		st.Pressure.Ratio*100, st.HighPct, st.LowPct, st.Hold), true
}

// decidePolicy applies the agent's policy: max_pending (for a job) and the token bucket. An
// admitted job under a max_pending holds its place until Controller.Finished.
func (c *Controller) decidePolicy(ctx context.Context, agent string, pol store.AdmissionPolicy, gpu, job bool) (Decision, error) {
	if !pol.Enabled {
		return admit(ReasonExempt, ""), nil
	}
	if job && pol.MaxPending > 0 {
		n, err := c.store.JobCountUnfinished(ctx, agent, pol.MaxPending)
		if err != nil {
			return Decision{}, fmt.Errorf("admission: %w", err)
		}
		if !c.unwritten.take(agent, n, pol.MaxPending) {
			return reject(ReasonMaxPending, c.cfg.RefreshInterval,
				"agent %s has %d unfinished jobs, its max_pending (submits being written included)",
				agent, pol.MaxPending), nil
		}
		d, err := c.decideBucket(ctx, agent, pol, gpu)
		if err != nil || !d.Admitted {
			c.unwritten.release(agent)
			return d, err
		}
		d.unwritten = agent
		return d, nil
	}
	return c.decideBucket(ctx, agent, pol, gpu)
}

// decideBucket applies the agent's token bucket.
func (c *Controller) decideBucket(ctx context.Context, agent string, pol store.AdmissionPolicy, gpu bool) (Decision, error) {
	ok, retryAfter, err := c.limiter.Allow(ctx, agent, pol)
	switch {
	case err != nil && ctx.Err() != nil:
		return Decision{}, err
	case err != nil:
		mode := c.cfg.LimiterDownCPU
		if gpu {
			mode = c.cfg.LimiterDownGPU
		}
		if mode == config.LimiterDownOpen {
			return admit(ReasonLimiterDown, ""), nil
		}
		return reject(ReasonLimiterDown, RetryAfterLimiterDown,
			"the admission limiter (Redis) is unreachable and %s work fails closed (admission.limiter_down_%s)",
			kind(gpu), kind(gpu)), nil
	case !ok:
		return reject(ReasonRateLimited, retryAfter, "agent %s is over its rate of %g per second (burst %d)",
			agent, pol.RatePerSec, pol.Burst), nil
	}
	return admit(ReasonOK, ""), nil
}

// duplicate admits a refused submit whose job_id names an existing job of the agent: the
// submit answers with that job and writes nothing, as a repeated submit must.
func (c *Controller) duplicate(ctx context.Context, r JobRequest) (Decision, bool) {
	j, err := c.store.JobGet(ctx, r.JobID)
	if err != nil || j.Agent != r.Agent {
		return Decision{}, false
	}
	return admit(ReasonDuplicate, j.Type), true
}

// Refresh rereads the policies, the GPU telemetry and the queue backlogs, and pings the
// limiter: the refresher's pass, exported so that tests and tools can force one.
func (c *Controller) Refresh(ctx context.Context) error {
	_, err := c.refresher.runOnce(ctx)
	return err
}

func labelOf(agent string, own bool) string {
	if own {
		return agent
	}
	return store.AdmissionDefaultAgent
}

func kind(gpu bool) string {
	if gpu {
		return "gpu"
	}
	return "cpu"
}
