// Package nodes serves the node registry (docs/architecture.md, "Nodes"): every node with its
// labels, its status (ready, cordoned, offline), its GPUs, workers and active leases, and the
// cordon an admin puts on a node to keep the scheduler from placing new work there.
//
// The rows are the store's (store.NodeExecutor); registrations and telemetry write them
// (pools, leases). This package reads them together with the workers, GPUs and leases of each
// node, and writes the cordon with its audit row in one transaction.
package nodes

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// Statuses of a node.
const (
	// StatusReady: the node may take new work.
	StatusReady = "ready"
	// StatusCordoned: an admin cordoned it; nothing new is placed there.
	StatusCordoned = "cordoned"
	// StatusOffline: no live worker is registered on it and its GPU telemetry (if it ever
	// had any) is older than leases.telemetry_freshness.
	StatusOffline = "offline"
)

// Audit event types of the node registry.
const (
	EventCordoned   = "node.cordoned"
	EventUncordoned = "node.uncordoned"
)

// ReasonMax is the longest cordon reason, in bytes (nodes.cordon_reason).
const ReasonMax = 512

// leaseListMax is the most active leases one read lists (the store's list cap).
const leaseListMax = 1000

// View is a node as GET /nodes shows it.
type View struct {
	store.Node
	Status  string
	GPUs    []leases.GPUStatus
	Workers []store.Worker
	// Leases are the node's active leases, newest first (at most leaseListMax over all nodes
	// in a listing).
	Leases []store.Lease
}

// Service reads and cordons nodes. It is safe for concurrent use.
type Service struct {
	st     store.Store
	leases *leases.Manager
	now    func() time.Time
}

// NewService returns the service over st; lm computes the GPUs' free memory and freshness as
// GET /gpus does. now is the clock (nil: time.Now).
func NewService(st store.Store, lm *leases.Manager, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{st: st, leases: lm, now: now}
}

// List returns every node, by id: those of the registry, and those that workers or GPU rows
// name but the registry has not recorded yet (written before it existed).
func (s *Service) List(ctx context.Context) ([]View, error) {
	return s.read(ctx, "")
}

// Get returns one node, or store.ErrNotFound when neither the registry nor any worker or GPU
// names it.
func (s *Service) Get(ctx context.Context, id string) (View, error) {
	vs, err := s.read(ctx, id)
	if err != nil {
		return View{}, err
	}
	if len(vs) == 0 {
		return View{}, fmt.Errorf("node %s: %w", id, store.ErrNotFound)
	}
	return vs[0], nil
}

// SetCordon cordons or uncordons node id for actor, with its audit row (node.cordoned,
// node.uncordoned: node_id, reason, was) in the same transaction, and returns the node. A
// node that workers or GPUs name but the registry does not is recorded first; an unknown node
// is store.ErrNotFound. Cordoning a cordoned node again updates its reason and actor.
func (s *Service) SetCordon(ctx context.Context, id string, cordoned bool, reason, actor string) (View, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return View{}, err
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	err := s.st.WithTx(ctx, func(tx store.Tx) error {
		before, err := tx.NodeGet(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			if err = tx.NodeUpsert(ctx, id, nil, now); err == nil {
				before, err = tx.NodeGet(ctx, id)
			}
		}
		if err != nil {
			return err
		}
		if _, err := tx.NodeSetCordon(ctx, id, cordoned, reason, actor, now); err != nil {
			return err
		}
		typ := EventCordoned
		if !cordoned {
			typ = EventUncordoned
		}
		details, _ := json.Marshal(map[string]any{"node_id": id, "reason": reason, "was_cordoned": before.Cordoned})
		return tx.AuditInsert(ctx, []store.AuditEvent{{TS: now, EventType: typ, Actor: actor, Details: details}})
	})
	if err != nil {
		return View{}, fmt.Errorf("set cordon of node %s: %w", id, err)
	}
	return s.Get(ctx, id)
}

// read assembles the views of every node, or of node id only.
func (s *Service) read(ctx context.Context, id string) ([]View, error) {
	rows, err := s.st.NodeList(ctx)
	if err != nil {
		return nil, err
	}
	gpus, err := s.leases.GPUs(ctx, id)
	if err != nil {
		return nil, err
	}
	workers, err := s.st.WorkerList(ctx, "", true)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	active, err := s.st.LeaseList(ctx, store.LeaseListParams{Status: store.LeaseActive, NodeID: id, Limit: leaseListMax})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	byID := map[string]*View{}
	add := func(node string) *View {
		if v := byID[node]; v != nil {
			return v
		}
		v := &View{Node: store.Node{ID: node, Labels: map[string]string{}}}
		byID[node] = v
		return v
	}
	for _, n := range rows {
		if id == "" || n.ID == id {
			add(n.ID).Node = n
		}
	}
	for _, g := range gpus {
		v := add(g.NodeID)
		v.GPUs = append(v.GPUs, g)
	}
	for _, w := range workers {
		if w.NodeID != "" && (id == "" || w.NodeID == id) {
			v := add(w.NodeID)
			v.Workers = append(v.Workers, w)
		}
	}
	for _, l := range active {
		if v := byID[l.NodeID]; v != nil {
			v.Leases = append(v.Leases, l)
		}
	}
	fresh := s.leases.Config().TelemetryFreshness
	out := make([]View, 0, len(byID))
	for _, v := range byID {
		v.Status = status(*v, fresh)
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b View) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// status is a node's status: cordoned when cordoned; offline when no live worker is
// registered on it and its GPU telemetry (of any GPU, lost ones too) is older than fresh;
// ready otherwise.
func status(v View, fresh time.Duration) string {
	if v.Cordoned {
		return StatusCordoned
	}
	for _, w := range v.Workers {
		if w.Status != store.WorkerOffline {
			return StatusReady
		}
	}
	for _, g := range v.GPUs {
		if g.Age < fresh {
			return StatusReady
		}
	}
	return StatusOffline
}
