package pools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// reconcilePool decides, writes the decision (transition, instructions) in one fenced
// transaction, then acts on the processes, rescues, and records spawned_workers.
func (r *Reconciler) reconcilePool(ctx context.Context, p store.Pool, ws []store.Worker, now time.Time, res *ReconcileResult) error {
	ms := r.members(p.ID, ws)
	pl := r.decide(p, ms, now)
	if pl.requeue > 0 && (res.RequeueAfter == 0 || pl.requeue < res.RequeueAfter) {
		res.RequeueAfter = pl.requeue
	}
	from := p.Status
	if pl.to != "" || len(pl.instruct) > 0 || pl.start > 0 || len(pl.stop) > 0 || len(pl.kill) > 0 {
		// Even without a row to write, processes are only touched after the fence passed.
		written := 0
		err := r.fenced(ctx, func(tx store.Tx) error {
			cur := p
			written = 0
			var events []store.AuditEvent
			if pl.to != "" {
				ev, err := Transition(ctx, tx, Change{Pool: &cur, To: pl.to, Reason: pl.reason, Now: now, Actor: leaderActor})
				if err != nil {
					return err
				}
				events = append(events, ev)
			}
			for m, in := range pl.instruct {
				w := *m.w
				ev, err := instruct(ctx, tx, &w, in, now, leaderActor, pl.why)
				if errors.Is(err, store.ErrNotFound) {
					continue // deregistered meanwhile
				} else if err != nil {
					return err
				}
				if ev != nil {
					events, written = append(events, *ev), written+1
				}
			}
			return tx.AuditInsert(ctx, events)
		})
		if errors.Is(err, store.ErrConflict) || errors.Is(err, ErrIllegalTransition) {
			r.log.Debug("pool changed during the pass; deciding again next pass", "pool_id", p.ID, "error", err)
			res.RequeueAfter = requeueMin
			return nil
		}
		if err != nil {
			return err
		}
		res.Instructed += written
		if pl.to != "" {
			p.Status = pl.to
			res.Transitions = append(res.Transitions, p.ID+":"+string(from)+"->"+string(pl.to))
			r.log.Info("pool "+string(pl.to), "pool_id", p.ID, "from", from, "reason", pl.reason)
		}
	}
	r.act(ctx, p, &pl, res)
	if pl.rescue {
		n, err := r.rescueJobs(ctx, p.ID)
		res.Rescued += n
		if err != nil {
			return err
		}
	}
	if pl.spawned != p.SpawnedWorkers {
		return r.fenced(ctx, func(tx store.Tx) error {
			err := tx.PoolUpdate(ctx, store.PoolUpdate{ID: p.ID, From: p.Status, To: p.Status, SpawnedWorkers: &pl.spawned, Now: now})
			if errors.Is(err, store.ErrConflict) {
				return nil // the status moved on; the next pass counts again
			}
			return err
		})
	}
	return nil
}

// act signals and starts processes. Failures are logged: the next pass sees what is left.
func (r *Reconciler) act(ctx context.Context, p store.Pool, pl *plan, res *ReconcileResult) {
	for _, m := range pl.kill {
		if err := r.prov.Kill(m.id()); err != nil {
			r.log.Error("kill worker failed", "pool_id", p.ID, "worker_id", m.id(), "error", err)
			continue
		}
		res.Killed++
	}
	for _, m := range pl.stop {
		if contains(pl.kill, m) {
			continue
		}
		if err := r.prov.Stop(m.id()); err != nil {
			r.log.Error("stop worker failed", "pool_id", p.ID, "worker_id", m.id(), "error", err)
			continue
		}
		res.Stopped++
	}
	for i := range pl.start {
		spec := WorkerSpec{PoolID: p.ID, WorkerID: newWorkerID(p.ID), Types: p.Types, ModelID: p.ModelID,
			Adapter: p.Adapter, Variant: p.Variant}
		if _, err := r.prov.Start(ctx, spec); err != nil {
			pl.spawned -= pl.start - i
			if errors.Is(err, ErrBackingOff) {
				r.log.Debug("not starting a worker yet", "pool_id", p.ID, "error", err)
			} else {
				r.log.Error("start worker failed", "pool_id", p.ID, "error", err)
			}
			return
		}
		res.Started++
	}
}

// rescueJobs rescues the claimed and running jobs of an evicted pool's workers.
func (r *Reconciler) rescueJobs(ctx context.Context, poolID string) (int, error) {
	jobs, err := r.st.JobListInFlightByPool(ctx, poolID, rescueBatch)
	if err != nil {
		return 0, fmt.Errorf("rescue jobs of evicted pool: %w", err)
	}
	n := 0
	for _, j := range jobs {
		outcome, err := r.rescuer.Rescue(ctx, j.ID, ReasonEvicted)
		if err != nil {
			return n, fmt.Errorf("rescue jobs of evicted pool: %w", err)
		}
		if outcome != "" && outcome != engine.OutcomeStale {
			n++
			r.log.Info("job of evicted pool rescued", "pool_id", poolID, "job_id", j.ID, "worker_id", j.WorkerID, "outcome", outcome)
		}
	}
	return n, nil
}

// newWorkerID names a worker the local provisioner starts: the pool's id and 32 random bits.
func newWorkerID(poolID string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return poolID + "-" + hex.EncodeToString(b[:])
}
