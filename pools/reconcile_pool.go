package pools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// member is one worker of a pool as the reconciler sees it: a registered row, a process the
// provisioner started, or both (the same worker id).
type member struct {
	w    *store.Worker
	proc *Process
}

func (m *member) id() string {
	if m.w != nil {
		return m.w.ID
	}
	return m.proc.WorkerID
}

// leaving reports whether the worker is on its way out: told to drain or stop, draining by
// itself (SIGTERM), or signalled by the provisioner.
func (m *member) leaving() bool {
	return (m.w != nil && (m.w.Instruction != store.InstructionNone || m.w.Status == store.WorkerDraining)) ||
		(m.proc != nil && m.proc.Stopping())
}

// plan is what one pass does to one pool.
type plan struct {
	to       store.PoolStatus // "" : no transition
	reason   string
	instruct map[*member]store.WorkerInstruction
	why      string // the reason written with the instructions
	start    int
	stop     []*member
	kill     []*member
	rescue   bool
	spawned  int
	requeue  time.Duration
}

func (pl *plan) order(m *member, in store.WorkerInstruction) {
	if m.w != nil && in.Severity() > m.w.Instruction.Severity() {
		pl.instruct[m] = in
	}
}

func (pl *plan) addKill(m *member) {
	if !contains(pl.kill, m) {
		pl.kill = append(pl.kill, m)
	}
}

// due records that something needs a pass d from now.
func (pl *plan) due(d time.Duration) {
	if d > 0 && (pl.requeue == 0 || d < pl.requeue) {
		pl.requeue = d
	}
}

// members joins the pool's live registered workers with the provisioner's processes.
func (r *Reconciler) members(poolID string, ws []store.Worker) []*member {
	byID := map[string]*member{}
	for i := range ws {
		byID[ws[i].ID] = &member{w: &ws[i]}
	}
	for _, p := range r.prov.Running(poolID) {
		m := byID[p.WorkerID]
		if m == nil {
			m = &member{}
			byID[p.WorkerID] = m
		}
		m.proc = &p
	}
	out := make([]*member, 0, len(byID))
	for _, m := range byID {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id() < out[j].id() })
	return out
}

// decide is the level-based core: from the pool's row and its members, what to do now.
func (r *Reconciler) decide(p store.Pool, ms []*member, now time.Time) plan {
	pl := plan{instruct: map[*member]store.WorkerInstruction{}}
	managed := r.prov.Managed()
	killAfter := r.cfg.DrainGrace
	if p.Status == store.PoolEvicted {
		killAfter = r.cfg.EvictGrace
	}
	for _, m := range ms {
		if m.proc != nil && m.proc.Stopping() {
			if left := killAfter - now.Sub(m.proc.StopRequestedAt); left <= 0 {
				pl.addKill(m)
			} else {
				pl.due(left)
			}
		}
	}
	switch p.Status {
	case store.PoolStarting, store.PoolRunning:
		if reason, left := holdLeft(p, ms, now); left <= 0 && reason != "" {
			pl.to, pl.reason, pl.why = store.PoolDraining, reason, reason
			for _, m := range ms {
				pl.order(m, store.InstructionDrain)
				if m.proc != nil && !m.proc.Stopping() {
					pl.stop = append(pl.stop, m)
				}
			}
			pl.spawned = len(ms)
			return pl
		} else if reason != "" {
			pl.due(left)
		}
		var active []*member
		for _, m := range ms {
			if m.leaving() {
				continue
			}
			if managed && m.w == nil && m.proc != nil {
				if left := r.cfg.StartTimeout - now.Sub(m.proc.StartedAt); left <= 0 {
					r.log.Warn("worker did not register in time; killing it", "pool_id", p.ID,
						"worker_id", m.id(), "start_timeout", r.cfg.StartTimeout)
					pl.addKill(m)
					continue
				} else {
					pl.due(left)
				}
			}
			active = append(active, m)
		}
		if managed {
			switch n := len(active); {
			case n < p.DesiredWorkers:
				pl.start = p.DesiredWorkers - n
			case n > p.DesiredWorkers:
				pl.why = fmt.Sprintf("scaled down to %d", p.DesiredWorkers)
				victims := pickVictims(active, n-p.DesiredWorkers)
				for _, m := range victims {
					pl.order(m, store.InstructionDrain)
					if m.proc != nil {
						pl.stop = append(pl.stop, m)
					}
				}
				kept := active[:0:0]
				for _, m := range active {
					if !contains(victims, m) {
						kept = append(kept, m)
					}
				}
				active = kept
			}
		}
		ready := 0
		for _, m := range active {
			if m.w != nil {
				ready++
			}
		}
		if p.Status == store.PoolStarting && ready >= p.DesiredWorkers {
			pl.to, pl.reason = store.PoolRunning, fmt.Sprintf("%d of %d workers live", ready, p.DesiredWorkers)
		}
		pl.spawned = len(active) + pl.start
	default: // draining, stopped, evicted
		in := impliedInstruction(p.Status)
		pl.why = "pool " + string(p.Status)
		overdue := p.Status == store.PoolDraining && now.Sub(p.StatusChangedAt) >= r.cfg.DrainGrace
		if overdue {
			in, pl.why = store.InstructionStop, "drain grace over"
		} else if p.Status == store.PoolDraining && len(ms) > 0 {
			pl.due(r.cfg.DrainGrace - now.Sub(p.StatusChangedAt))
		}
		for _, m := range ms {
			pl.order(m, in)
			switch {
			case m.proc == nil:
			case overdue:
				pl.addKill(m)
			case !m.proc.Stopping():
				pl.stop = append(pl.stop, m)
			}
		}
		if p.Status == store.PoolDraining && len(ms) == 0 {
			pl.to, pl.reason = store.PoolStopped, "every worker left"
		}
		pl.rescue = p.Status == store.PoolEvicted
		pl.spawned = len(ms)
	}
	return pl
}

// holdLeft says how long an idle pool has before its hold expires (reason "" when it never
// does: no hold, or a job in flight).
func holdLeft(p store.Pool, ms []*member, now time.Time) (reason string, left time.Duration) {
	if p.HoldSeconds <= 0 {
		return "", 0
	}
	for _, m := range ms {
		if m.w != nil && m.w.InFlight > 0 {
			return "", 0
		}
	}
	last := p.StartedAt
	for _, t := range []*time.Time{p.LastHeartbeat, p.LastActivityAt} {
		if t != nil && t.After(last) {
			last = *t
		}
	}
	hold := time.Duration(p.HoldSeconds) * time.Second
	return fmt.Sprintf("hold expired: idle for %s", hold), hold - now.Sub(last)
}

// pickVictims chooses n workers to drain on a scale-down: processes not registered yet first
// (nothing warm to lose), then idle workers, then the least busy; among equals the newest.
func pickVictims(active []*member, n int) []*member {
	c := append([]*member(nil), active...)
	rank := func(m *member) (int, int) {
		switch {
		case m.w == nil:
			return 0, 0
		case m.w.InFlight == 0:
			return 1, 0
		}
		return 2, m.w.InFlight
	}
	born := func(m *member) time.Time {
		if m.w != nil {
			return m.w.RegisteredAt
		}
		return m.proc.StartedAt
	}
	sort.SliceStable(c, func(i, j int) bool {
		ri, bi := rank(c[i])
		rj, bj := rank(c[j])
		if ri != rj || bi != bj {
			return ri < rj || (ri == rj && bi < bj)
		}
		return born(c[i]).After(born(c[j]))
	})
	return c[:n]
}

func contains(ms []*member, m *member) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

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
