package pools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/nodelabels"
	"github.com/gpuorch/orchestrator/store"
)

// Limits of a worker's registration.
const (
	// maxWorkerTypes bounds the job types one worker serves.
	maxWorkerTypes = 64
	// maxTelemetryBytes bounds the telemetry snapshot a heartbeat carries (kept as is).
	maxTelemetryBytes = 256 << 10
)

// RegisterParams is a worker's registration (POST /internal/workers/register).
type RegisterParams struct {
	WorkerID    string
	PoolID      string // "" for a worker of no pool
	NodeID      string
	Hostname    string
	PID         int
	Types       []string
	Concurrency int
	// NodeLabels are the node's configured labels (nil: the node's are kept); recorded in the
	// node registry when NodeID is set.
	NodeLabels map[string]string
	// WarmModel is the model the worker preloaded before registering ("" for none).
	WarmModel string
}

// HeartbeatParams is one worker heartbeat (POST /internal/workers/{id}/heartbeat).
type HeartbeatParams struct {
	WorkerID string
	// Status is idle, executing or draining, as the worker sees itself.
	Status   store.WorkerStatus
	InFlight int
	// JobsClaimed is the worker's running total of claimed jobs: an increase since the last
	// heartbeat is work, even when the jobs finished in between.
	JobsClaimed int64
	// Telemetry is the node's GPU snapshot (JSON), kept with the worker for operators.
	Telemetry json.RawMessage
}

// Instruction answers a registration or heartbeat: what the worker must do, and how often to
// heartbeat.
type Instruction struct {
	Instruction store.WorkerInstruction
	PoolStatus  store.PoolStatus // "" when the worker's pool does not exist
}

// RegisterWorker records a worker (a new life: an existing row of the same id is replaced) and
// returns what its pool's status tells it, so that a worker starting into a draining pool
// leaves at once.
func (s *Service) RegisterWorker(ctx context.Context, p RegisterParams) (Instruction, error) {
	if err := validateRegister(p); err != nil {
		return Instruction{}, err
	}
	var out Instruction
	err := s.st.WithTx(ctx, func(tx store.Tx) error {
		now := s.nowUTC()
		w := store.Worker{ID: p.WorkerID, PoolID: p.PoolID, NodeID: p.NodeID, Hostname: p.Hostname,
			PID: p.PID, Types: p.Types, Concurrency: p.Concurrency, Status: store.WorkerIdle,
			RegisteredAt: now, LastHeartbeat: now, WarmModel: p.WarmModel}
		if err := tx.WorkerUpsert(ctx, w); err != nil {
			return err
		}
		if p.NodeID != "" {
			if err := tx.NodeUpsert(ctx, p.NodeID, p.NodeLabels, now); err != nil {
				return err
			}
		}
		var err error
		if out, err = poolInstruction(ctx, tx, p.PoolID, store.InstructionNone); err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{auditEvent(EventWorkerRegistered, p.PoolID, now,
			"worker:"+p.WorkerID, map[string]any{"worker_id": p.WorkerID, "node_id": p.NodeID,
				"hostname": p.Hostname, "pid": p.PID, "types": p.Types, "concurrency": p.Concurrency, "node_labels": p.NodeLabels, "warm_model": p.WarmModel})})
	})
	if err != nil {
		return Instruction{}, fmt.Errorf("register worker %s: %w", p.WorkerID, err)
	}
	s.log.Info("worker registered", "worker_id", p.WorkerID, "pool_id", p.PoolID, "node_id", p.NodeID, "pid", p.PID)
	s.Reconcile()
	return out, nil
}

// HeartbeatWorker records a heartbeat and answers the worker's instruction: its own (a
// scale-down picked it) or its pool's, whichever is more severe. A worker the registry does
// not know is store.ErrNotFound: it must register again. A heartbeat that reports work also
// marks its pool active (which resets the pool's hold).
func (s *Service) HeartbeatWorker(ctx context.Context, p HeartbeatParams) (Instruction, error) {
	if err := validateHeartbeat(p); err != nil {
		return Instruction{}, err
	}
	var out Instruction
	err := s.st.WithTx(ctx, func(tx store.Tx) error {
		now := s.nowUTC()
		w, err := tx.WorkerGet(ctx, p.WorkerID, true)
		if err != nil {
			return err
		}
		active := p.InFlight > 0 || p.JobsClaimed > w.JobsClaimed
		u := store.WorkerUpdate{ID: w.ID, Status: &p.Status, InFlight: &p.InFlight,
			JobsClaimed: &p.JobsClaimed, Telemetry: p.Telemetry, LastHeartbeat: &now}
		if active {
			u.LastActiveAt = &now
		}
		if err := tx.WorkerUpdate(ctx, u); err != nil {
			return err
		}
		if w.Status == store.WorkerOffline {
			// Back from a silence the leader took for a loss (a long pause, a partition).
			err := tx.AuditInsert(ctx, []store.AuditEvent{auditEvent(EventWorkerRegistered, w.PoolID, now,
				"worker:"+w.ID, map[string]any{"worker_id": w.ID, "reason": "heartbeat after offline"})})
			if err != nil {
				return err
			}
		}
		if active && w.PoolID != "" {
			if err := tx.PoolTouch(ctx, w.PoolID, false, now); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		out, err = poolInstruction(ctx, tx, w.PoolID, w.Instruction)
		return err
	})
	if err != nil {
		return Instruction{}, fmt.Errorf("heartbeat of worker %s: %w", p.WorkerID, err)
	}
	return out, nil
}

// DeregisterWorker forgets a worker that exits cleanly. Deregistering an unknown worker is not
// an error (the call may be repeated after a lost answer).
func (s *Service) DeregisterWorker(ctx context.Context, id string) error {
	if !ident.ID.MatchString(id) {
		return invalid("worker_id", "must be %s", ident.ID.Rule())
	}
	var poolID string
	err := s.st.WithTx(ctx, func(tx store.Tx) error {
		w, err := tx.WorkerGet(ctx, id, true)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := tx.WorkerDelete(ctx, id); err != nil {
			return err
		}
		poolID = w.PoolID
		return tx.AuditInsert(ctx, []store.AuditEvent{auditEvent(EventWorkerDeregistered, w.PoolID, s.nowUTC(),
			"worker:"+id, map[string]any{"worker_id": id, "jobs_claimed": w.JobsClaimed})})
	})
	if err != nil {
		return fmt.Errorf("deregister worker %s: %w", id, err)
	}
	s.log.Info("worker deregistered", "worker_id", id, "pool_id", poolID)
	s.Reconcile()
	return nil
}

// poolInstruction combines a worker's own instruction with its pool's.
func poolInstruction(ctx context.Context, tx store.Tx, poolID string, own store.WorkerInstruction) (Instruction, error) {
	out := Instruction{Instruction: own}
	if poolID == "" {
		return out, nil
	}
	p, err := tx.PoolGet(ctx, poolID, false)
	if errors.Is(err, store.ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return Instruction{}, err
	}
	out.PoolStatus = p.Status
	out.Instruction = stronger(own, impliedInstruction(p.Status))
	return out, nil
}

func validateRegister(p RegisterParams) error {
	switch {
	case !ident.ID.MatchString(p.WorkerID):
		return invalid("worker_id", "must be %s", ident.ID.Rule())
	case p.PoolID != "" && !ident.ID.MatchString(p.PoolID):
		return invalid("pool_id", "must be %s", ident.ID.Rule())
	case p.NodeID != "" && !ident.ID.MatchString(p.NodeID):
		return invalid("node_id", "must be %s", ident.ID.Rule())
	case !nameRE.MatchString(p.Hostname):
		return invalid("hostname", "must be at most 128 printable characters")
	case !nameRE.MatchString(p.WarmModel):
		return invalid("warm_model", "must be at most 128 printable characters")
	case p.PID < 0:
		return invalid("pid", "must not be negative")
	case p.Concurrency < 0 || p.Concurrency > 10000:
		return invalid("concurrency", "must be in 0..10000")
	case len(p.Types) > maxWorkerTypes:
		return invalid("types", "at most %d job types", maxWorkerTypes)
	}
	if slices.ContainsFunc(p.Types, func(t string) bool { return t == "" || len(t) > 64 }) {
		return invalid("types", "a job type name is 1 to 64 characters")
	}
	if err := nodelabels.Validate("node_labels", p.NodeLabels); err != nil {
		var le *nodelabels.Error
		errors.As(err, &le)
		return invalid(le.Field, "%s", le.Message)
	}
	return nil
}

func validateHeartbeat(p HeartbeatParams) error {
	switch {
	case !ident.ID.MatchString(p.WorkerID):
		return invalid("worker_id", "must be %s", ident.ID.Rule())
	case p.Status != store.WorkerIdle && p.Status != store.WorkerExecuting && p.Status != store.WorkerDraining:
		return invalid("status", "must be idle, executing or draining")
	case p.InFlight < 0:
		return invalid("in_flight", "must not be negative")
	case p.JobsClaimed < 0:
		return invalid("jobs_claimed", "must not be negative")
	case len(p.Telemetry) > maxTelemetryBytes:
		return invalid("telemetry", "is larger than %d bytes", maxTelemetryBytes)
	}
	return nil
}

// Worker returns a registered worker (store.ErrNotFound when the registry does not know it).
func (s *Service) Worker(ctx context.Context, id string) (store.Worker, error) {
	if !ident.ID.MatchString(id) {
		return store.Worker{}, invalid("worker_id", "must be %s", ident.ID.Rule())
	}
	w, err := s.st.WorkerGet(ctx, id, false)
	if err != nil {
		return store.Worker{}, fmt.Errorf("get worker %s: %w", id, err)
	}
	return w, nil
}
