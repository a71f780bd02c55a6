package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// workerBodyBytes bounds a registration or heartbeat (a heartbeat carries the node's telemetry).
const workerBodyBytes = 1 << 20

// registerWorker handles POST /internal/workers/register: the worker is recorded (a new life
// replaces a row of the same id) and told its instruction and heartbeat interval.
func (s *Server) registerWorker(c *gin.Context) {
	var req wire.RegisterWorkerRequest
	if err := decodeJSON(c, workerBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	scope, err := s.workerScope(c)
	if err == nil {
		err = registrationInScope(scope, req)
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	in, err := s.pools.RegisterWorker(c.Request.Context(), pools.RegisterParams{
		WorkerID: req.WorkerID, PoolID: req.PoolID, NodeID: req.NodeID, Hostname: req.Hostname,
		PID: req.PID, Types: req.Types, Concurrency: req.Concurrency, NodeLabels: req.NodeLabels, WarmModel: req.WarmModel,
	})
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, s.instructionToWire(in))
}

// registrationInScope checks a registration against the token's scope: a scoped token
// registers only in its pool and only for types of its scope, named.
func registrationInScope(scope TokenRecord, req wire.RegisterWorkerRequest) error {
	if scope.Pool != "" && req.PoolID != scope.Pool {
		return outOfScope("pool_id", "this worker token is scoped to pool %q, not %q", scope.Pool, req.PoolID)
	}
	if scope.Types == nil {
		return nil
	}
	if len(req.Types) == 0 {
		return outOfScope("types", "this worker token is scoped to job types %s: name the ones this worker serves", scopeTypes(scope.Types))
	}
	var out []string
	for _, t := range req.Types {
		if !inScope(scope.Types, t) {
			out = append(out, t)
		}
	}
	if len(out) > 0 {
		return outOfScope("types", "job types %s are outside this worker token's scope (%s)", scopeTypes(out), scopeTypes(scope.Types))
	}
	return nil
}

// workerHeartbeat handles POST /internal/workers/{id}/heartbeat. A worker the registry does not
// know gets a 404 and registers again.
func (s *Server) workerHeartbeat(c *gin.Context) {
	var req wire.WorkerHeartbeatRequest
	if err := decodeJSON(c, workerBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if err := s.workerInScope(c, c.Param("id")); err != nil {
		s.writeError(c, err)
		return
	}
	p := pools.HeartbeatParams{WorkerID: c.Param("id"), Status: store.WorkerStatus(req.Status),
		InFlight: req.InFlight, JobsClaimed: req.JobsClaimed}
	if req.Telemetry != nil {
		raw, err := json.Marshal(req.Telemetry)
		if err != nil {
			s.writeError(c, badRequest("telemetry", "cannot be encoded: %s", err.Error()))
			return
		}
		p.Telemetry = raw
	}
	in, err := s.pools.HeartbeatWorker(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, s.instructionToWire(in))
}

// deregisterWorker handles POST /internal/workers/{id}/deregister: 204, also for a worker the
// registry does not know (the call may be repeated).
func (s *Server) deregisterWorker(c *gin.Context) {
	if err := s.workerInScope(c, c.Param("id")); err != nil {
		if !errors.Is(err, store.ErrNotFound) { // unknown: nothing to deregister, 204 below
			s.writeError(c, err)
			return
		}
	}
	if err := s.pools.DeregisterWorker(c.Request.Context(), c.Param("id")); err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// workerInScope lets a scoped worker token act only on workers its scope could have registered:
// of its pool, serving only types of its scope. Unscoped tokens pass without a lookup.
func (s *Server) workerInScope(c *gin.Context, workerID string) error {
	scope, err := s.workerScope(c)
	if err != nil || !scope.Scoped() {
		return err
	}
	w, err := s.pools.Worker(c.Request.Context(), workerID)
	if err != nil {
		return err
	}
	return registrationInScope(scope, wire.RegisterWorkerRequest{WorkerID: w.ID, PoolID: w.PoolID, Types: w.Types})
}

func (s *Server) instructionToWire(in pools.Instruction) wire.WorkerInstruction {
	out := wire.WorkerInstruction{Instruction: string(in.Instruction),
		HeartbeatInterval: wire.Duration(s.pools.HeartbeatInterval()), PoolStatus: string(in.PoolStatus)}
	if s.preRun != nil {
		out.PreRunTypes = s.preRun.Types()
	}
	return out
}
