package pools

import (
	"fmt"
	"slices"
	"sort"
	"time"

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
	killAfter := r.cfg.DrainGrace
	if p.Status == store.PoolEvicted {
		killAfter = r.cfg.EvictGrace
	}
	// A local worker asked to go that overstays its grace is killed, whatever the pool's state.
	for _, m := range ms {
		if m.proc != nil && m.proc.Stopping() {
			if left := killAfter - now.Sub(m.proc.StopRequestedAt); left <= 0 {
				pl.addKill(m)
			} else {
				pl.due(left)
			}
		}
	}
	if p.Status.Live() {
		r.decideLive(p, ms, now, &pl)
	} else {
		r.decideEnding(p, ms, now, &pl)
	}
	return pl
}

// decideLive handles a starting or running pool: hold expiry, then scaling to desired_workers.
func (r *Reconciler) decideLive(p store.Pool, ms []*member, now time.Time, pl *plan) {
	if reason, left := holdLeft(p, ms, now); reason != "" && left <= 0 {
		pl.to, pl.reason, pl.why = store.PoolDraining, reason, reason
		for _, m := range ms {
			pl.order(m, store.InstructionDrain)
			if m.proc != nil && !m.proc.Stopping() {
				pl.stop = append(pl.stop, m)
			}
		}
		pl.spawned = len(ms)
		return
	} else if reason != "" {
		pl.due(left)
	}
	managed := r.prov.Managed()
	var active []*member
	for _, m := range ms {
		if m.leaving() {
			continue
		}
		if managed && m.w == nil && m.proc != nil {
			left := r.cfg.StartTimeout - now.Sub(m.proc.StartedAt)
			if left <= 0 {
				r.log.Warn("worker did not register in time; killing it", "pool_id", p.ID,
					"worker_id", m.id(), "start_timeout", r.cfg.StartTimeout)
				pl.addKill(m)
				continue
			}
			pl.due(left)
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
			active = slices.DeleteFunc(active, func(m *member) bool { return contains(victims, m) })
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
}

// decideEnding handles a draining, stopped or evicted pool: every worker is told to go (local
// ones are signalled), a drain past its grace becomes a stop, and a drained pool with no
// worker left stops. An evicted pool's jobs are rescued.
func (r *Reconciler) decideEnding(p store.Pool, ms []*member, now time.Time, pl *plan) {
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
