package api

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// poolBodyBytes bounds the body of POST /workers/pool (metadata included).
const poolBodyBytes = 64 << 10

// poolsEnabled answers 503 when the server runs without the pools service (a test server).
func (s *Server) poolsEnabled(c *gin.Context) {
	if s.pools == nil {
		s.writeError(c, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "worker pools are not enabled on this server"})
		return
	}
	c.Next()
}

// poolError maps the pools package's refusals: an illegal transition (draining an evicted
// pool) is a 409 saying so.
func poolError(err error) error {
	if errors.Is(err, pools.ErrIllegalTransition) {
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error()}
	}
	return err
}

// createPool handles POST /workers/pool: 201 with the new pool, 200 when it existed (updated
// or not).
func (s *Server) createPool(c *gin.Context) {
	var req wire.PoolRequest
	if err := decodeJSON(c, poolBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	res, err := s.pools.CreatePool(c.Request.Context(), pools.CreateParams{
		PoolID: req.PoolID, Agent: req.AgentName, ModelID: req.ModelID, Adapter: req.Adapter,
		Variant: req.Variant, Types: req.Types, DesiredWorkers: req.DesiredWorkers,
		HoldSeconds: req.HoldSeconds, Metadata: req.Metadata, Actor: mustIdentity(c).Actor(),
	})
	if err != nil {
		s.writeError(c, poolError(err))
		return
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	c.JSON(status, wire.PoolResponse{Pool: poolToWire(res.Pool, nil), Created: res.Created,
		Updated: res.Updated, PreloadID: res.PreloadID})
}

// listPools handles GET /workers/pools.
func (s *Server) listPools(c *gin.Context) {
	ps, err := s.pools.ListPools(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	who := mustIdentity(c)
	out := wire.PoolList{Pools: make([]wire.Pool, 0, len(ps))}
	for _, p := range ps {
		out.Pools = append(out.Pools, poolFor(who, poolToWire(p, nil)))
	}
	c.JSON(http.StatusOK, out)
}

// getPool handles GET /workers/pools/{id}: the pool with its registered workers.
func (s *Server) getPool(c *gin.Context) {
	p, ws, err := s.pools.GetPool(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	if ws == nil {
		ws = []store.Worker{}
	}
	c.JSON(http.StatusOK, poolFor(mustIdentity(c), poolToWire(p, ws)))
}

// poolFor is what who may see of a pool: its metadata (which an operator may fill with
// credentials, endpoints, anything) only for an admin and for the agent the pool serves. A pool
// that serves no agent shows its metadata to admins only. Without it, the field is left out.
func poolFor(who Identity, p wire.Pool) wire.Pool {
	if who.Role != RoleAdmin && (p.AgentName == "" || p.AgentName != who.Agent) {
		p.Metadata = nil
	}
	return p
}

// heartbeatPool handles POST /workers/pools/{id}/heartbeat: the pool's agent (or an admin)
// keeps it warm. An agent may heartbeat only its own pools.
func (s *Server) heartbeatPool(c *gin.Context) {
	id := c.Param("id")
	if who := mustIdentity(c); who.Role == RoleAgent {
		p, _, err := s.pools.GetPool(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		if p.Agent != who.Agent {
			s.writeError(c, forbidden("pool %s serves agent %q, not %q", id, p.Agent, who.Agent))
			return
		}
	}
	p, err := s.pools.HeartbeatPool(c.Request.Context(), id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, poolToWire(p, nil))
}

// drainPool handles POST /workers/pools/{id}/drain.
func (s *Server) drainPool(c *gin.Context) {
	p, changed, err := s.pools.DrainPool(c.Request.Context(), c.Param("id"), mustIdentity(c).Actor())
	if err != nil {
		s.writeError(c, poolError(err))
		return
	}
	c.JSON(http.StatusOK, wire.PoolChange{Pool: poolToWire(p, nil), Changed: changed})
}

// drainAll handles POST /control/drain: every starting or running pool drains.
func (s *Server) drainAll(c *gin.Context) {
	drained, err := s.pools.DrainAll(c.Request.Context(), mustIdentity(c).Actor())
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.DrainAllResponse{Drained: make([]wire.Pool, 0, len(drained))}
	for _, p := range drained {
		out.Drained = append(out.Drained, poolToWire(p, nil))
	}
	c.JSON(http.StatusOK, out)
}

// evictPool handles POST /control/evict_pool {pool_id}.
func (s *Server) evictPool(c *gin.Context) {
	var req wire.EvictRequest
	if err := decodeJSON(c, poolBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if req.PoolID == "" {
		s.writeError(c, badRequest("pool_id", "is required"))
		return
	}
	p, changed, err := s.pools.EvictPool(c.Request.Context(), req.PoolID, mustIdentity(c).Actor())
	if err != nil {
		s.writeError(c, poolError(err))
		return
	}
	c.JSON(http.StatusOK, wire.PoolChange{Pool: poolToWire(p, nil), Changed: changed})
}

// reconcile handles POST /control/reconcile: 202, the pass runs in the background.
func (s *Server) reconcile(c *gin.Context) {
	c.JSON(http.StatusAccepted, wire.ReconcileResponse{Triggered: s.pools.Reconcile()})
}

func poolToWire(p store.Pool, ws []store.Worker) wire.Pool {
	out := wire.Pool{
		PoolID: p.ID, AgentName: p.Agent, ModelID: p.ModelID, Adapter: p.Adapter, Variant: p.Variant,
		Types: p.Types, DesiredWorkers: p.DesiredWorkers, SpawnedWorkers: p.SpawnedWorkers,
		Status: string(p.Status), StatusReason: p.StatusReason, StatusChangedAt: p.StatusChangedAt.UTC(),
		HoldSeconds: p.HoldSeconds, CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
		StartedAt: p.StartedAt.UTC(), LastHeartbeat: utcPtr(p.LastHeartbeat),
		LastActivityAt: utcPtr(p.LastActivityAt), Metadata: p.Metadata,
	}
	if out.Types == nil {
		out.Types = []string{}
	}
	if ws != nil {
		out.Workers = make([]wire.Worker, 0, len(ws))
		for _, w := range ws {
			out.Workers = append(out.Workers, workerToWire(w))
		}
	}
	return out
}

func workerToWire(w store.Worker) wire.Worker {
	out := wire.Worker{
		WorkerID: w.ID, PoolID: w.PoolID, NodeID: w.NodeID, Hostname: w.Hostname, PID: w.PID,
		Types: w.Types, Concurrency: w.Concurrency, Status: string(w.Status),
		Instruction: string(w.Instruction), InFlight: w.InFlight, JobsClaimed: w.JobsClaimed,
		RegisteredAt: w.RegisteredAt.UTC(), LastHeartbeat: w.LastHeartbeat.UTC(),
		LastActiveAt: utcPtr(w.LastActiveAt), Telemetry: w.Telemetry, WarmModel: w.WarmModel,
	}
	if out.Types == nil {
		out.Types = []string{}
	}
	return out
}
