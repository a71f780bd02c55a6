// Package leases is the lease manager: it places leases on GPUs by their telemetry, grants,
// renews, releases and lists them, and records the telemetry nodes report (gpu_devices).
//
// Nothing runs without a lease: a job whose worker stops renewing it is rescued. A gpu lease reserves memory on one GPU
// of one node; a cpu lease holds a CPU slot and is placed nowhere. Placement reads a node's GPUs
// with their active reservations under SELECT … FOR UPDATE, so grants on one node are serialized
// across every orchestrator instance and a GPU is never promised more than it has:
//
//	free(gpu) = memory_total − max(memory_used, reserved by active leases) − safety margin
//
// where memory_used is the latest telemetry (what the driver sees, including processes the
// orchestrator knows nothing of) and reserved is what leases promised (including holders that
// have not allocated yet). A request fits a GPU whose free memory is at least what it asks;
// among those, the one with the least free memory wins (best fit), leaving large holes for
// large jobs.
//
// Lease states change only through Transition, which checks the allowed-transitions table and
// returns the audit row to write in the same transaction. The LeasePurger loop lives here; the
// expiry of a lease together with the rescue of its job is the engine's (the purger's
// Expirer), which owns the job state machine.
package leases

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// ErrIllegalTransition is returned for a move the lease state machine does not allow.
var ErrIllegalTransition = errors.New("illegal lease transition")

// transitions is the lease state machine: an active lease is released by its holder or expires
// when the holder goes quiet; both ends are final, so nothing ever resurrects a lease.
var transitions = map[store.LeaseStatus][]store.LeaseStatus{
	store.LeaseActive:   {store.LeaseReleased, store.LeaseExpired},
	store.LeaseReleased: nil,
	store.LeaseExpired:  nil,
}

// CanTransition reports whether the lease state machine allows from → to.
func CanTransition(from, to store.LeaseStatus) bool {
	for _, t := range transitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// Audit event types of leases (orchestrator_audit.event_type, with lease_token set).
const (
	EventGranted  = "lease.granted"
	EventReleased = "lease.released"
	EventExpired  = "lease.expired"
)

// eventOf is the audit event type of a move to status to.
func eventOf(to store.LeaseStatus) string {
	switch to {
	case store.LeaseReleased:
		return EventReleased
	case store.LeaseExpired:
		return EventExpired
	}
	return "lease." + string(to)
}

// Transition validates the move of l to status to, applies it with a compare-and-set on l's
// current status, and returns the audit event to insert in the same transaction. l is updated
// in memory to match the row.
func Transition(ctx context.Context, tx store.Executor, l *store.Lease, to store.LeaseStatus, now time.Time, actor string, details map[string]any) (store.AuditEvent, error) {
	evs, err := TransitionMany(ctx, tx, []Change{{Lease: l, To: to, Details: details}}, now, actor)
	if err != nil {
		return store.AuditEvent{}, err
	}
	return evs[0], nil
}

// Change is one lease's move of a batch, with the details of its audit event.
type Change struct {
	Lease   *store.Lease
	To      store.LeaseStatus
	Details map[string]any
}

// TransitionMany is Transition for distinct leases at once: every move is validated, then all
// are applied with one batch of compare-and-sets (a lease that moved on fails the whole batch
// with store.ErrConflict), and the audit events come back in order. A lease held in a job row
// (InJobRow) is not written: its job's transition in the same transaction, which ends the
// attempt, clears the token from the row, and that ends it.
func TransitionMany(ctx context.Context, tx store.Executor, changes []Change, now time.Time, actor string) ([]store.AuditEvent, error) {
	if len(changes) == 0 {
		return nil, nil
	}
	us := make([]store.LeaseStatusUpdate, 0, len(changes))
	for _, c := range changes {
		from := c.Lease.Status
		if !CanTransition(from, c.To) {
			return nil, fmt.Errorf("%w: lease %s %s -> %s", ErrIllegalTransition, c.Lease.Token, from, c.To)
		}
		if !InJobRow(c.Lease.Token) {
			us = append(us, store.LeaseStatusUpdate{Token: c.Lease.Token, From: from, To: c.To, Now: now})
		}
	}
	if err := setStatuses(ctx, tx, us); err != nil {
		return nil, err
	}
	events := make([]store.AuditEvent, len(changes))
	for i, c := range changes {
		c.Lease.Status = c.To
		ended := now
		c.Lease.EndedAt = &ended
		events[i] = auditEvent(*c.Lease, eventOf(c.To), now, actor, c.Details)
	}
	return events, nil
}

// setStatuses applies the compare-and-sets us, if any.
func setStatuses(ctx context.Context, tx store.Executor, us []store.LeaseStatusUpdate) error {
	if len(us) == 0 {
		return nil
	}
	if err := tx.LeaseSetStatusMany(ctx, us); err != nil {
		if len(us) == 1 {
			return fmt.Errorf("lease %s %s -> %s: %w", us[0].Token, us[0].From, us[0].To, err)
		}
		return fmt.Errorf("move %d leases: %w", len(us), err)
	}
	return nil
}

// GrantedEvent is the audit event of a new lease an agent took. A job's lease has none: the
// job's claim row records its grant (GrantDetails) in the same transaction.
func GrantedEvent(l store.Lease, actor string) store.AuditEvent {
	return auditEvent(l, EventGranted, l.CreatedAt, actor, GrantDetails(l))
}

// GrantDetails describes a new lease in an audit row: what it holds, where, for whom and for
// how long.
func GrantDetails(l store.Lease) map[string]any {
	details := map[string]any{"mode": l.Mode, "node_id": l.NodeID, "memory_mb": l.MemoryMB,
		"ttl_ms": l.TTL.Milliseconds(), "agent": l.Agent}
	if l.GPUIndex != nil {
		details["gpu_index"] = *l.GPUIndex
	}
	if l.Exclusive {
		details["exclusive"] = true
	}
	return details
}

func auditEvent(l store.Lease, typ string, now time.Time, actor string, details map[string]any) store.AuditEvent {
	ev := store.AuditEvent{TS: now, EventType: typ, JobID: l.JobID, LeaseToken: l.Token, Actor: actor}
	if len(details) > 0 {
		ev.Details, _ = json.Marshal(details)
	}
	return ev
}
