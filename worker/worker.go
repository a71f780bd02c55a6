package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuorch/orchestrator/config"
)

// Causes of a handler's cancellation, told apart in the reported error.
var (
	errShutdown  = errors.New("worker shutdown")
	errCancelled = errors.New("cancelled by the orchestrator")
	// errLeaseLost: the job's lease expired or was released (the renew call said it is gone);
	// the job belongs to someone else now and its result would be refused.
	errLeaseLost = errors.New("lease lost")
)

// Worker runs jobs of its types: one reader per type's consumer group, a shared pool of
// Concurrency slots, and two report batchers (starts, results). Create it with New and call Run
// once.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	handlers map[string]Handler // by job type name
	types    map[string]*config.JobType
	slots    *slots
	// deferred are the entries refused with retry_later, claimed again when room may have
	// freed (deferred.go).
	deferred *deferrals
	// renewNow asks the renewer for a report before its next tick (deferred.go).
	renewNow chan struct{}
	// warmModel is the model the preload loaded ("" for none), set before the worker registers.
	warmModel string

	starts  *batcher[*run]
	results *batcher[*run]

	// handlerCtx is the parent of every job's context: it outlives Run's ctx by the shutdown
	// grace. reportCtx bounds the reports and acks: it ends FlushTimeout into the final flush.
	handlerCtx    context.Context
	handlerCancel context.CancelCauseFunc
	reportCtx     context.Context
	reportCancel  context.CancelFunc

	readers  sync.WaitGroup
	handling waitGroup // handlers that have not returned
	jobs     waitGroup // jobs whose result is not queued for reporting yet

	mu      sync.Mutex
	running map[string]*run // jobs whose handler has not returned, by id
	// held are the runs whose lease the renewer keeps alive: from the claim until their result
	// is reported (or given up).
	held map[*run]struct{}

	// closing is set once Run's context ended: no new work is claimed from then on.
	closing atomic.Bool
	// alongTurn picks the job type whose stream claimAlong reads next; alongPausedUntil (unix
	// nanoseconds) pauses claimAlong after a retry_later.
	alongTurn        atomic.Uint32
	alongPausedUntil atomic.Int64

	ran atomic.Bool
	// claimed counts the jobs claimed since start; heartbeats report it (worker/registry.go).
	claimed atomic.Int64
	// preRunTypes are the types with a pre-run hook that the orchestrator's answers name.
	preRunTypes preRunTypes
}

// New checks cfg, fills its defaults, and resolves each type's handler.
func New(cfg Config) (*Worker, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "worker", "worker_id", cfg.WorkerID, "pool_id", cfg.PoolID),
		handlers: map[string]Handler{},
		types:    map[string]*config.JobType{},
		slots:    newSlots(cfg.Concurrency),
		deferred: newDeferrals(),
		renewNow: make(chan struct{}, 1),
		running:  map[string]*run{},
		held:     map[*run]struct{}{},
	}
	for _, t := range cfg.Types {
		h, _ := cfg.Registry.Lookup(t.Handler)
		w.handlers[t.Name], w.types[t.Name] = h, t
	}
	if cfg.Concurrency < len(cfg.Types) {
		// An idle reader holds one slot while it waits; with fewer slots than types a busy type
		// waits up to Block for a slot held by an idle one.
		w.log.Warn("concurrency is below the number of job types; idle types will delay busy ones",
			"concurrency", cfg.Concurrency, "types", len(cfg.Types))
	}
	w.starts = newBatcher(cfg.FlushSize, cfg.FlushDelay, w.flushStarts)
	w.results = newBatcher(cfg.FlushSize, cfg.FlushDelay, w.flushResults)
	return w, nil
}

// Run serves until ctx ends, then shuts down gracefully: it stops reading, lets running jobs
// finish within ShutdownGrace, cancels the rest (reported failed with "worker shutdown", so they
// are retried), reports and acks everything within FlushTimeout, and returns nil. It returns an
// error only when it cannot start (the consumer groups cannot be created).
func (w *Worker) Run(ctx context.Context) error {
	if !w.ran.CompareAndSwap(false, true) {
		return errors.New("run worker: Run was already called")
	}
	for _, t := range w.cfg.Types {
		if err := w.ensureGroups(ctx, t); err != nil {
			return fmt.Errorf("run worker: %w", err)
		}
	}
	detached := context.WithoutCancel(ctx)
	w.handlerCtx, w.handlerCancel = context.WithCancelCause(detached)
	w.reportCtx, w.reportCancel = context.WithCancel(detached)
	defer w.reportCancel()
	defer w.handlerCancel(errShutdown)
	// Warm before it registers: the scheduler sees it only once it can take its model's jobs.
	if err := w.preload(ctx); err != nil {
		return fmt.Errorf("run worker: %w", err)
	}
	// Registered while it runs: the registry's drain order ends ctx as a signal does.
	ctx, leave := w.startMembership(ctx)
	defer leave()
	// Reads are not interrupted by shutdown (see Config.Block); readCtx ends only when Run returns.
	readCtx, readCancel := context.WithCancel(detached)
	defer readCancel()

	go w.starts.run(w.reportCtx)
	go w.results.run(w.reportCtx)
	// Report the node's telemetry before the first claim, which places GPU jobs by it.
	w.renewFirst(ctx)
	renewCtx, renewStop := context.WithCancel(w.reportCtx)
	renewDone := make(chan struct{})
	go w.renewLoop(renewCtx, renewDone)

	w.readers.Add(1)
	go w.retryDeferred(ctx)
	names := make([]string, 0, len(w.types))
	for _, t := range w.cfg.Types {
		names = append(names, t.Name)
		w.readers.Add(1)
		go w.read(ctx, readCtx, t)
	}
	slices.Sort(names)
	w.log.Info("worker started", "types", names, "concurrency", w.cfg.Concurrency, "batch", w.cfg.Batch)

	<-ctx.Done()
	w.closing.Store(true)
	w.log.Info("worker shutting down", "running", w.runningCount(), "grace", w.cfg.ShutdownGrace.String())
	w.readers.Wait()
	w.drainHandlers()
	// Leases are renewed until the results are reported: a lease that expired while its result
	// waited would get the result refused.
	w.flushAll()
	renewStop()
	<-renewDone
	w.log.Info("worker stopped")
	return nil
}

// drainHandlers waits ShutdownGrace for the running handlers, then cancels them and waits up to
// FlushTimeout more for them to return.
func (w *Worker) drainHandlers() {
	if w.handling.waitFor(w.cfg.ShutdownGrace) {
		return
	}
	w.log.Warn("shutdown grace over; cancelling running jobs", "job_ids", w.runningIDs())
	w.handlerCancel(errShutdown)
	if !w.handling.waitFor(w.cfg.FlushTimeout) {
		w.log.Error("handlers ignore their cancelled context; leaving their jobs to the lease purger",
			"job_ids", w.runningIDs())
	}
}

// flushAll sends the queued starts, then the results, within FlushTimeout.
func (w *Worker) flushAll() {
	deadline := time.AfterFunc(w.cfg.FlushTimeout, w.reportCancel)
	defer deadline.Stop()
	w.starts.Close()
	<-w.starts.Done()
	// Every returned handler's job queues its result as soon as its start was reported.
	if !w.jobs.waitFor(w.cfg.FlushTimeout) {
		w.log.Error("some results were not queued before the flush deadline", "job_ids", w.runningIDs())
	}
	w.results.Close()
	<-w.results.Done()
}

// runningIDs returns the ids of jobs whose handler has not returned, sorted.
func (w *Worker) runningIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.running))
}

func (w *Worker) runningCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// cancelJobs cancels the handlers of the listed jobs (the API said an operator cancelled them).
func (w *Worker) cancelJobs(ids []string) {
	if len(ids) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if r, ok := w.running[id]; ok {
			w.log.Info("cancelling job on the orchestrator's request", "job_id", id, "attempt", r.job.Attempt)
			r.cancel(errCancelled)
		}
	}
}
