package pools

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
)

// Reconciler defaults.
const (
	// ReconcileIntervalDefault is the pace of the passes.
	ReconcileIntervalDefault = config.PoolsReconcileIntervalDefault
	// ForgetOfflineAfterDefault is how long an offline worker's row is kept for operators.
	ForgetOfflineAfterDefault = time.Hour
	// reconcileJitter spreads the passes: Interval ± 10%.
	reconcileJitter = 0.1
	// forgetBatch bounds the offline rows one pass deletes.
	forgetBatch = 100
	// rescueBatch bounds the jobs of an evicted pool one pass rescues.
	rescueBatch = 500
	// requeueMin keeps a pass from following the previous one too closely.
	requeueMin = 20 * time.Millisecond
)

// leaderActor is the audit actor of the reconciler's writes.
const leaderActor = "leader"

// Rescuer takes a job away from a worker that is gone (engine.Engine.Rescue).
type Rescuer interface {
	Rescue(ctx context.Context, jobID, reason string) (outcome string, err error)
}

// ReconcilerConfig configures a Reconciler. Zero durations take the config package's defaults.
type ReconcilerConfig struct {
	// Interval is the pace of the passes (ReconcileIntervalDefault, ± 10%).
	Interval time.Duration
	// OfflineAfter is how long a worker may stay silent before it is offline
	// (config.Pools.OfflineAfter). It is also the adoption window of a new leader: during its
	// first OfflineAfter nobody is marked offline, so that the workers of a pool get to
	// heartbeat again after an orchestrator restart and are adopted, not duplicated.
	OfflineAfter time.Duration
	// DrainGrace bounds a drain: past it, the workers left are told to stop and local ones
	// killed (config.PoolsDrainGraceDefault). A local worker asked to drain on its own (a
	// scale-down) is killed when it overstays it too.
	DrainGrace time.Duration
	// EvictGrace is the time between SIGTERM and SIGKILL of an evicted local worker.
	EvictGrace time.Duration
	// StartTimeout is how long a local worker may take to register before it is killed.
	StartTimeout time.Duration
	// ForgetOfflineAfter deletes offline workers' rows this long after their last heartbeat.
	ForgetOfflineAfter time.Duration
	// Fence guards every write with the leadership term (nil: none, for tests).
	Fence store.Fence
	// Stagger delays the first pass randomly by up to one Interval (off in tests).
	Stagger bool
	// Logger (default slog.Default()); Now is the clock (default time.Now).
	Logger *slog.Logger
	Now    func() time.Time
}

func (c ReconcilerConfig) withDefaults() ReconcilerConfig {
	c.Interval = cmp.Or(c.Interval, ReconcileIntervalDefault)
	c.OfflineAfter = cmp.Or(c.OfflineAfter, config.PoolsOfflineHeartbeatsDefault*config.PoolsHeartbeatIntervalDefault)
	c.DrainGrace = cmp.Or(c.DrainGrace, config.PoolsDrainGraceDefault)
	c.EvictGrace = cmp.Or(c.EvictGrace, config.PoolsEvictGraceDefault)
	c.StartTimeout = cmp.Or(c.StartTimeout, config.PoolsStartTimeoutDefault)
	c.ForgetOfflineAfter = cmp.Or(c.ForgetOfflineAfter, ForgetOfflineAfterDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Reconciler is the leader's pool loop. Each pass is level-based: it reads every pool, the
// registered workers and the provisioner's processes, and acts on the difference: marks silent
// or exited workers offline, starts and stops workers to match desired_workers, moves pools
// through their states (hold expiry, end of a drain), relays drain and evict orders, rescues
// the jobs of evicted pools, and records spawned_workers. It runs every Interval and when woken
// (POST /control/reconcile, a pool change, a worker's exit). One Reconciler lives for one
// leadership term; its writes are fenced with that term.
type Reconciler struct {
	startstop.Base
	cfg     ReconcilerConfig
	st      store.Store
	prov    Provisioner
	rescuer Rescuer
	log     *slog.Logger
	wake    chan struct{}
	// startedAt opens the adoption window (ReconcilerConfig.OfflineAfter).
	startedAt time.Time
}

// ReconcileResult is what one pass did.
type ReconcileResult struct {
	Pools       int
	Started     int
	Stopped     int // SIGTERM sent
	Killed      int // SIGKILL sent
	Instructed  int // drain or stop orders written
	Offline     int // workers marked offline
	Rescued     int // jobs of evicted pools rescued
	Transitions []string
	// RequeueAfter is when the next pass is due at the latest (a grace or hold expiring).
	RequeueAfter time.Duration
}

// NewReconciler returns the reconciler of one leadership term.
func NewReconciler(st store.Store, prov Provisioner, rescuer Rescuer, cfg ReconcilerConfig) *Reconciler {
	cfg = cfg.withDefaults()
	return &Reconciler{cfg: cfg, st: st, prov: prov, rescuer: rescuer, wake: make(chan struct{}, 1),
		log:       cfg.Logger.With("component", "pools", "loop", "reconciler", "provisioner", prov.Name()),
		startedAt: cfg.Now()}
}

// Start runs the passes in the background until ctx ends or Stop; it returns at once.
func (r *Reconciler) Start(ctx context.Context) error {
	r.Go(ctx, r.loop)
	return nil
}

// Wake asks for a pass now (coalesced with one already asked for).
func (r *Reconciler) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// loop calls runOnce every Interval ± jitter, sooner when a pass asks for it or on Wake.
func (r *Reconciler) loop(ctx context.Context) {
	delay := time.Duration(0)
	if r.cfg.Stagger {
		delay = time.Duration(rand.Int64N(int64(r.cfg.Interval) + 1))
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
		res, err := r.runOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Error("reconcile pass failed", "error", err)
		}
		next := startstop.Jitter(r.cfg.Interval, reconcileJitter)
		if res.RequeueAfter > 0 {
			next = min(next, max(res.RequeueAfter, requeueMin))
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

func (r *Reconciler) nowUTC() time.Time { return r.cfg.Now().UTC().Truncate(time.Microsecond) }

// fenced runs fn in one transaction behind the term fence.
func (r *Reconciler) fenced(ctx context.Context, fn func(tx store.Tx) error) error {
	return store.WithFence(ctx, r.st, r.cfg.Fence, fn)
}

// runOnce is one pass over every pool.
func (r *Reconciler) runOnce(ctx context.Context) (ReconcileResult, error) {
	now := r.nowUTC()
	var res ReconcileResult
	workers, err := r.st.WorkerList(ctx, "", true)
	if err != nil {
		return res, fmt.Errorf("reconcile pools: %w", err)
	}
	var errs []error
	if err := r.markOffline(ctx, workers, now, &res); err != nil {
		if errors.Is(err, store.ErrFenced) {
			return res, fmt.Errorf("reconcile pools: %w", err)
		}
		errs = append(errs, err)
	}
	if err := r.fenced(ctx, func(tx store.Tx) error {
		_, err := tx.WorkerDeleteOffline(ctx, now.Add(-r.cfg.ForgetOfflineAfter), forgetBatch)
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	pools, err := r.st.PoolList(ctx)
	if err != nil {
		return res, errors.Join(append(errs, fmt.Errorf("reconcile pools: %w", err))...)
	}
	byPool := map[string][]store.Worker{}
	for _, w := range workers {
		if w.Status != store.WorkerOffline {
			byPool[w.PoolID] = append(byPool[w.PoolID], w)
		}
	}
	for _, p := range pools {
		res.Pools++
		if err := r.reconcilePool(ctx, p, byPool[p.ID], now, &res); err != nil {
			if errors.Is(err, store.ErrFenced) {
				return res, fmt.Errorf("reconcile pool %s: %w", p.ID, err)
			}
			errs = append(errs, fmt.Errorf("reconcile pool %s: %w", p.ID, err))
		}
	}
	return res, errors.Join(errs...)
}

// markOffline marks offline the workers whose local process exited without deregistering, and
// (after the adoption window) those silent for OfflineAfter. workers is updated in memory.
func (r *Reconciler) markOffline(ctx context.Context, workers []store.Worker, now time.Time, res *ReconcileResult) error {
	exited := map[string]Exit{}
	for _, ex := range r.prov.Exited() {
		exited[ex.WorkerID] = ex
	}
	bound := now.Add(-r.cfg.OfflineAfter)
	checkSilence := now.Sub(r.startedAt) >= r.cfg.OfflineAfter
	var exitIDs, silentIDs []string
	for _, w := range workers {
		switch {
		case w.Status == store.WorkerOffline:
		case exited[w.ID].WorkerID != "":
			exitIDs = append(exitIDs, w.ID)
		case checkSilence && w.LastHeartbeat.Before(bound):
			silentIDs = append(silentIDs, w.ID)
		}
	}
	if len(exitIDs) == 0 && len(silentIDs) == 0 {
		return nil
	}
	var marked []string
	err := r.fenced(ctx, func(tx store.Tx) error {
		marked = nil
		// The exited processes' rows are marked whatever their last heartbeat; the silent
		// ones only while still silent (a heartbeat may have come in since the listing).
		for _, sel := range []store.WorkerOfflineParams{
			{IDs: exitIDs, HeartbeatBefore: now.Add(time.Hour)},
			{IDs: silentIDs, HeartbeatBefore: bound},
		} {
			if len(sel.IDs) == 0 {
				continue
			}
			ids, err := tx.WorkerMarkOffline(ctx, sel)
			if err != nil {
				return err
			}
			marked = append(marked, ids...)
		}
		events := make([]store.AuditEvent, 0, len(marked))
		for _, id := range marked {
			w := findWorker(workers, id)
			details := map[string]any{"worker_id": id, "last_heartbeat": w.LastHeartbeat}
			if ex, ok := exited[id]; ok {
				details["reason"], details["exit_code"] = "process exited", ex.Code
				if ex.Signal != "" {
					details["signal"] = ex.Signal
				}
			} else {
				details["reason"] = fmt.Sprintf("silent for %s", now.Sub(w.LastHeartbeat).Round(time.Millisecond))
			}
			events = append(events, auditEvent(EventWorkerOffline, w.PoolID, now, leaderActor, details))
		}
		return tx.AuditInsert(ctx, events)
	})
	if err != nil {
		return fmt.Errorf("mark workers offline: %w", err)
	}
	for _, id := range marked {
		w := findWorker(workers, id)
		w.Status, w.InFlight = store.WorkerOffline, 0
		r.log.Warn("worker offline", "worker_id", id, "pool_id", w.PoolID, "last_heartbeat", w.LastHeartbeat)
	}
	res.Offline += len(marked)
	return nil
}

func findWorker(ws []store.Worker, id string) *store.Worker {
	for i := range ws {
		if ws[i].ID == id {
			return &ws[i]
		}
	}
	return &store.Worker{ID: id}
}
