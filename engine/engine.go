package engine

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// ErrJobTerminal is returned when an operation needs a live job but the job is terminal
// (cancel of a done job, for instance). The API answers 409.
var ErrJobTerminal = errors.New("job is in a terminal state")

// ValidationError is bad input: Field names the offending field. The API answers 400.
type ValidationError struct {
	Field   string
	Message string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Message }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Engine is the job lifecycle. It is safe for concurrent use.
type Engine struct {
	store   store.Store
	streams *streams.Client
	cfg     *config.Config
	now     func() time.Time
	log     *slog.Logger
	leases  *leases.Manager
	fence   Fence
	// onGPUFreed: see Options.GPUFreed.
	onGPUFreed func(nodeID string)
	// wakeScheduler: see Options.WakeScheduler.
	wakeScheduler func()
	// wakeFlows: see Options.WakeFlows.
	wakeFlows func()
	// outbox commits submits in groups and publishes committed jobs.
	outbox *outbox.Outbox[*submitReq]
	// redisStartsEmpty: see Options.RedisStartsEmpty.
	redisStartsEmpty bool
	// nodeLabels are the registered nodes' labels submit checks constraints against.
	nodeLabels cached[map[string]map[string]string]
	// pools are the pools submit checks pool_id and model_id against.
	pools poolCache
	// approvals are the approval policies in force (approvals.go).
	approvals approvalPolicies
}

// Options are optional dependencies of New.
type Options struct {
	// Now is the clock (default time.Now); tests move it.
	Now func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Fence guards the leader-only writes of Rescue and the lease purger (nil: none); the
	// leader wiring checks the leadership term with it.
	Fence Fence
	// Observer is told about every committed job status change (nil: none); the metrics
	// count jobs and time their waits and runs with it.
	Observer Observer
	// Leases is the lease manager job leases are placed with; the process wiring builds it, so
	// that the API, the telemetry poller and the engine share one. Nil: the engine builds its
	// own over st from cfg (tests).
	Leases *leases.Manager
	// GPUFreed, when set, is called after a completion or claim has committed the release of
	// GPU leases, once per node they were on: the wiring wakes the telemetry poller of its own
	// node, so that placement sees the memory the jobs used as free without waiting a poll
	// interval (a worker reports its own node the same way, worker/deferred.go).
	GPUFreed func(nodeID string)
	// WakeScheduler, when set, is called when jobs wait for the scheduler (a submit committed
	// them, or a scheduled job without GPUs gave back its worker slot): the wiring wakes the
	// leader's scheduler, wherever it runs.
	WakeScheduler func()
	// WakeFlows, when set, is called when the flows' resolver has work: a transaction ended a
	// job that others wait for (store.FlowHasDependents), or a submit wrote jobs that wait.
	// The wiring wakes the leader's resolver, wherever it runs.
	WakeFlows func()
	// RedisStartsEmpty says the Redis is new and empty at every start of the process, as the
	// embedded mode's is: a recovery for its missing marker is how the process starts, not a
	// loss, and RecoverRedis logs it at info level instead of warning.
	RedisStartsEmpty bool
}

// New returns an Engine over the store and streams, for the job types of cfg.
func New(st store.Store, sc *streams.Client, cfg *config.Config, opts Options) *Engine {
	e := &Engine{
		store:   st,
		streams: sc,
		cfg:     cfg,
		now:     opts.Now,
		log:     logging.Component(opts.Logger, "engine"),
	}
	if e.now == nil {
		e.now = time.Now
	}
	e.fence = opts.Fence
	e.redisStartsEmpty = opts.RedisStartsEmpty
	e.onGPUFreed = opts.GPUFreed
	e.wakeScheduler = opts.WakeScheduler
	e.wakeFlows = opts.WakeFlows
	e.approvals.fromConfig = policiesOf(cfg)
	e.approvals.set(nil) // the table's come with the first refresh
	e.leases = opts.Leases
	if e.leases == nil {
		e.leases = NewLeaseManager(st, cfg, leases.Options{Now: e.now, Logger: opts.Logger})
	}
	if opts.Observer != nil || opts.WakeFlows != nil {
		e.store = &observedStore{Store: st, obs: opts.Observer, wake: opts.WakeFlows}
	}
	e.outbox = outbox.New(outbox.Options{
		Store:   e.store,
		Streams: sc,
		StreamOf: func(typ string) (string, bool) {
			if jt := cfg.JobType(typ); jt != nil {
				return jt.Stream, true
			}
			return "", false
		},
		Scheduled: !cfg.Scheduler.Disabled,
		Unplaced:  opts.WakeScheduler,
		Logger:    opts.Logger,
	}, e.commitBatch)
	return e
}

// NewLeaseManager returns the lease manager of cfg's lease settings over st, with opts (its
// NodeID defaults to cfg's). Settings that config.Validate would refuse (a configuration built
// by hand) fall back to the defaults, with an error logged.
func NewLeaseManager(st store.Store, cfg *config.Config, opts leases.Options) *leases.Manager {
	opts.NodeID = cmp.Or(opts.NodeID, cfg.NodeID)
	lm, err := leases.New(st, leases.ConfigFrom(cfg), opts)
	if err != nil {
		cmp.Or(opts.Logger, slog.Default()).Error("invalid lease settings; using the defaults", "error", err)
		lm, _ = leases.New(st, leases.Config{}, opts)
	}
	return lm
}

// WakeFlows asks the leader's resolver for a pass soon (Options.WakeFlows); it never blocks.
func (e *Engine) WakeFlows() {
	if e.wakeFlows != nil {
		e.wakeFlows()
	}
}

// nowUTC is the engine clock in UTC, truncated to microseconds (the database's precision) so
// the in-memory row equals the stored one.
func (e *Engine) nowUTC() time.Time { return e.now().UTC().Truncate(time.Microsecond) }
