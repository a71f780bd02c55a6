// Package pools is worker pools and the worker registry.
//
// A pool is a named group of workers serving some job types with one model warm ("mistral":
// two workers on the inference stream). Pools are rows of worker_pools: they survive
// orchestrator restarts, and the leader's Reconciler makes the live workers match them through
// a Provisioner: LocalProvisioner starts and supervises worker processes on the leader's host,
// ExternalProvisioner leaves the replicas to Kubernetes/KEDA and only reports.
//
// Workers register and heartbeat (Service.RegisterWorker, Service.HeartbeatWorker); the answer
// to each heartbeat carries the worker's instruction: none, drain (stop reading, finish the jobs
// in flight, deregister, exit) or stop (cancel the jobs too, exit at once). A worker silent for
// a few intervals is marked offline by the leader; its leases are left to expire on their own.
//
// Pool states change only through Transition, which checks the allowed-transitions table and
// returns the audit row to write in the same transaction, so every change of a pool is
// explained and no path can skip the table.
package pools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// ErrIllegalTransition is returned for a move the pool state machine does not allow. The API
// answers 409.
var ErrIllegalTransition = errors.New("illegal pool transition")

// transitions is the pool state machine: from → allowed targets.
var transitions = map[store.PoolStatus][]store.PoolStatus{
	// all desired workers are live; hold expiry or an operator drains; an operator evicts.
	store.PoolStarting: {store.PoolRunning, store.PoolDraining, store.PoolEvicted},
	store.PoolRunning:  {store.PoolDraining, store.PoolEvicted},
	// the last worker left; an operator evicts the stragglers; the pool is posted again.
	store.PoolDraining: {store.PoolStopped, store.PoolEvicted, store.PoolStarting},
	// posted again: the pool restarts.
	store.PoolStopped: {store.PoolStarting},
	store.PoolEvicted: {store.PoolStarting},
}

// CanTransition reports whether the pool state machine allows from → to.
func CanTransition(from, to store.PoolStatus) bool {
	return slices.Contains(transitions[from], to)
}

// Audit event types of pools and workers (orchestrator_audit.event_type, with pool_id set).
// Transitions are "pool.<from>-><to>" (TransitionEvent).
const (
	EventPoolCreated = "pool.created"
	EventPoolUpdated = "pool.updated"
	// EventWorkerRegistered and EventWorkerDeregistered bracket a worker's life.
	EventWorkerRegistered   = "worker.registered"
	EventWorkerDeregistered = "worker.deregistered"
	// EventWorkerOffline: the worker went silent, or its process exited without deregistering.
	EventWorkerOffline = "worker.offline"
	// EventWorkerInstructed: the worker was told to drain or stop; details {"instruction": ...}.
	EventWorkerInstructed = "worker.instructed"
)

// TransitionEvent is the audit event type of a pool transition, e.g. "pool.running->draining".
func TransitionEvent(from, to store.PoolStatus) string {
	return "pool." + string(from) + "->" + string(to)
}

// Change is one validated transition of a pool, to be written with its audit row.
type Change struct {
	Pool   *store.Pool // the current row; updated in place on success
	To     store.PoolStatus
	Reason string
	// Spec and StartedAt are written with the transition when set (a pool posted again).
	Spec      *store.PoolSpec
	StartedAt *time.Time
	Now       time.Time
	Actor     string
	Details   map[string]any
}

// Transition validates c (From is the pool's current status), applies it with a
// compare-and-set, and returns the audit event to insert in the same transaction. The pool is
// updated in memory to match the row.
func Transition(ctx context.Context, tx store.Executor, c Change) (store.AuditEvent, error) {
	p := c.Pool
	from := p.Status
	if !CanTransition(from, c.To) {
		return store.AuditEvent{}, fmt.Errorf("%w: pool %s %s -> %s", ErrIllegalTransition, p.ID, from, c.To)
	}
	u := store.PoolUpdate{ID: p.ID, From: from, To: c.To, StatusReason: &c.Reason, Spec: c.Spec,
		StartedAt: c.StartedAt, Now: c.Now}
	if err := tx.PoolUpdate(ctx, u); err != nil {
		return store.AuditEvent{}, fmt.Errorf("pool %s %s -> %s: %w", p.ID, from, c.To, err)
	}
	p.Status, p.StatusReason, p.StatusChangedAt, p.UpdatedAt = c.To, c.Reason, c.Now, c.Now
	if c.Spec != nil {
		applySpec(p, *c.Spec)
	}
	if c.StartedAt != nil {
		p.StartedAt = *c.StartedAt
	}
	details := map[string]any{}
	for k, v := range c.Details {
		details[k] = v
	}
	if c.Reason != "" {
		details["reason"] = c.Reason
	}
	return auditEvent(TransitionEvent(from, c.To), p.ID, c.Now, c.Actor, details), nil
}

// applySpec mirrors a written spec on the in-memory row.
func applySpec(p *store.Pool, s store.PoolSpec) {
	p.Agent, p.ModelID, p.Adapter, p.Variant = s.Agent, s.ModelID, s.Adapter, s.Variant
	p.Types, p.DesiredWorkers, p.HoldSeconds, p.Metadata = s.Types, s.DesiredWorkers, s.HoldSeconds, s.Metadata
}

// specOf is the spec part of a pool row.
func specOf(p store.Pool) store.PoolSpec {
	return store.PoolSpec{Agent: p.Agent, ModelID: p.ModelID, Adapter: p.Adapter, Variant: p.Variant,
		Types: p.Types, DesiredWorkers: p.DesiredWorkers, HoldSeconds: p.HoldSeconds, Metadata: p.Metadata}
}

// auditEvent builds one audit row of a pool or worker event.
func auditEvent(typ, poolID string, now time.Time, actor string, details map[string]any) store.AuditEvent {
	ev := store.AuditEvent{TS: now, EventType: typ, PoolID: poolID, Actor: actor}
	if len(details) > 0 {
		ev.Details, _ = json.Marshal(details)
	}
	return ev
}

// impliedInstruction is what a pool's status tells every one of its workers: a pool that
// drains or stopped wants its workers gone after their jobs; an evicted one wants them gone now.
func impliedInstruction(s store.PoolStatus) store.WorkerInstruction {
	switch s {
	case store.PoolDraining, store.PoolStopped:
		return store.InstructionDrain
	case store.PoolEvicted:
		return store.InstructionStop
	}
	return store.InstructionNone
}

// stronger returns the more severe of two instructions.
func stronger(a, b store.WorkerInstruction) store.WorkerInstruction {
	if b.Severity() > a.Severity() {
		return b
	}
	return a
}

// instruct raises w's instruction to at least in (never lowers it) and returns the audit event,
// or nil when nothing changed. w is updated in memory.
func instruct(ctx context.Context, tx store.Executor, w *store.Worker, in store.WorkerInstruction, now time.Time, actor, reason string) (*store.AuditEvent, error) {
	if in.Severity() <= w.Instruction.Severity() {
		return nil, nil
	}
	if err := tx.WorkerUpdate(ctx, store.WorkerUpdate{ID: w.ID, Instruction: &in}); err != nil {
		return nil, fmt.Errorf("instruct worker %s to %s: %w", w.ID, in, err)
	}
	w.Instruction = in
	ev := auditEvent(EventWorkerInstructed, w.PoolID, now, actor,
		map[string]any{"worker_id": w.ID, "instruction": in, "reason": reason})
	return &ev, nil
}
