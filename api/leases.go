package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// Lease request limits.
const (
	// leaseBodyBytes bounds the body of POST /leases (metadata included).
	leaseBodyBytes = 64 << 10
	// leaseMetadataBytes bounds the metadata an agent may attach to a lease.
	leaseMetadataBytes = 16 << 10
	// leaseMaxMemoryMB bounds a memory request (16 TiB, the largest simulated GPU).
	leaseMaxMemoryMB = 16 << 20
	// LeaseListLimitDefault and LeaseListLimitMax bound GET /leases.
	LeaseListLimitDefault = 100
	LeaseListLimitMax     = 1000
)

// leaseTokenRE is the shape of a lease token: of a lease row, or of a lease held in a job's row
// (leases.NewJobToken, the job id after the separator); anything else cannot exist (404 without
// a query).
var leaseTokenRE = regexp.MustCompile(`^(` + leases.TokenPrefix + `[0-9a-f]{32}|` + leases.JobTokenPrefix +
	`[0-9a-f]{32}_[A-Za-z0-9._:-]{1,128})$`)

// grantLease handles POST /leases: 201 with the grant, 409 with the reason of a denial
// (no_capacity, node_unknown, telemetry_stale), 429 quota with Retry-After for a gpu lease that
// would take the agent past its GPU quota. An agent token takes leases for its own agent.
func (s *Server) grantLease(c *gin.Context) {
	id := mustIdentity(c)
	var req wire.LeaseRequest
	if err := decodeJSON(c, leaseBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	p, err := grantParams(id, req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if err := s.admitLease(c, p); err != nil {
		s.writeError(c, err)
		return
	}
	l, err := s.leases.Grant(c.Request.Context(), p)
	if qe := (*leases.QuotaError)(nil); errors.As(err, &qe) {
		setRetryAfter(c, qe.RetryAfter)
	}
	if err != nil {
		s.writeError(c, leaseError(err))
		return
	}
	c.JSON(http.StatusCreated, wire.LeaseGrant{Granted: true, Token: l.Token, Mode: string(l.Mode),
		NodeID: l.NodeID, GPUIndex: l.GPUIndex, GPUIndexes: l.GPUIndexes, MemoryMB: l.MemoryMB, ExpiresAt: l.ExpiresAt.UTC()})
}

// grantParams checks a lease request and binds it to the caller.
func grantParams(id Identity, req wire.LeaseRequest) (leases.GrantParams, error) {
	if id.Role == RoleAgent {
		switch req.Agent {
		case "":
			req.Agent = id.Agent
		case id.Agent:
		default:
			return leases.GrantParams{}, forbidden("this token takes leases for agent %q only", id.Agent)
		}
	}
	p := leases.GrantParams{Agent: req.Agent, NodeID: req.NodeID, MemoryMB: req.MinMemoryMB,
		Exclusive: req.Exclusive, Actor: id.Actor()}
	switch req.Mode {
	case "", wire.LeaseModeGPU:
		p.Mode = store.LeaseGPU
	case wire.LeaseModeCPU:
		p.Mode = store.LeaseCPU
	default:
		return p, badRequest("mode", "must be %q or %q", wire.LeaseModeGPU, wire.LeaseModeCPU)
	}
	switch {
	case p.Agent == "":
		return p, badRequest("agent", "is required")
	case !engine.AgentPattern.MatchString(p.Agent):
		return p, badID("agent", engine.AgentPattern)
	case p.NodeID != "" && !ident.ID.MatchString(p.NodeID):
		return p, badID("node_id", ident.ID)
	case p.Mode == store.LeaseGPU && (p.MemoryMB < 1 || p.MemoryMB > leaseMaxMemoryMB):
		return p, badRequest("min_memory_mb", "must be in 1..%d for a gpu lease", leaseMaxMemoryMB)
	case p.Mode == store.LeaseCPU && (p.MemoryMB < 0 || p.MemoryMB > leaseMaxMemoryMB):
		return p, badRequest("min_memory_mb", "must be in 0..%d", leaseMaxMemoryMB)
	case p.Mode == store.LeaseCPU && p.Exclusive:
		return p, badRequest("exclusive", "only a gpu lease can be exclusive")
	case req.TTLSeconds < 0 || int64(req.TTLSeconds) > int64(leases.MaxTTL/time.Second):
		// Checked in seconds: multiplied into a time.Duration first, 9223372037 would wrap
		// to a negative TTL and 18446744074 to a fraction of a second.
		return p, badRequest("ttl_seconds", "must be in 1..%d (0: the default)", int(leases.MaxTTL.Seconds()))
	}
	p.TTL = time.Duration(req.TTLSeconds) * time.Second
	if len(req.Metadata) > 0 && string(req.Metadata) != "null" {
		var obj map[string]json.RawMessage
		if len(req.Metadata) > leaseMetadataBytes || json.Unmarshal(req.Metadata, &obj) != nil {
			return p, badRequest("metadata", "must be a JSON object of at most %d bytes", leaseMetadataBytes)
		}
		p.Metadata = req.Metadata
	}
	return p, nil
}

// heartbeatLease handles POST /leases/:token/heartbeat: 200 with the extended lease, 404 for an
// unknown token (or another agent's), 410 for a lease that ended or expired; never resurrects.
func (s *Server) heartbeatLease(c *gin.Context) {
	token := c.Param("token")
	if !leaseTokenRE.MatchString(token) {
		s.writeError(c, notFound("no lease %q", token))
		return
	}
	l, err := s.leases.Heartbeat(c.Request.Context(), token, agentScope(mustIdentity(c)))
	if err != nil {
		s.writeError(c, leaseError(err))
		return
	}
	c.JSON(http.StatusOK, leaseToWire(l))
}

// releaseLease handles POST /leases/:token/release: 200 with the released lease (also when it
// was released already), 410 when it expired, 409 for a job's lease.
func (s *Server) releaseLease(c *gin.Context) {
	token := c.Param("token")
	if !leaseTokenRE.MatchString(token) {
		s.writeError(c, notFound("no lease %q", token))
		return
	}
	id := mustIdentity(c)
	l, err := s.leases.Release(c.Request.Context(), token, agentScope(id), id.Actor())
	if err != nil {
		s.writeError(c, leaseError(err))
		return
	}
	c.JSON(http.StatusOK, leaseToWire(l))
}

// listLeases handles GET /leases?status=&agent=&node_id=&job_id=&limit=, newest first. An agent
// token lists its own agent's leases only.
func (s *Server) listLeases(c *gin.Context) {
	p := store.LeaseListParams{
		Status: store.LeaseStatus(c.Query("status")), Agent: c.Query("agent"), NodeID: c.Query("node_id"),
		JobID: c.Query("job_id"), Limit: LeaseListLimitDefault,
	}
	if err := checkLeaseList(&p, mustIdentity(c), c.Query("limit")); err != nil {
		s.writeError(c, err)
		return
	}
	got, err := s.leases.List(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.LeaseList{Leases: make([]wire.Lease, 0, len(got))}
	for _, l := range got {
		out.Leases = append(out.Leases, leaseToWire(l))
	}
	c.JSON(http.StatusOK, out)
}

func checkLeaseList(p *store.LeaseListParams, id Identity, limit string) error {
	if p.Status != "" && !p.Status.Valid() {
		return badRequest("status", "must be active, released or expired")
	}
	if scope := agentScope(id); scope != "" {
		if p.Agent != "" && p.Agent != scope {
			return forbidden("this token lists the leases of agent %q only", scope)
		}
		p.Agent = scope
	}
	switch {
	case p.Agent != "" && !engine.AgentPattern.MatchString(p.Agent):
		return badID("agent", engine.AgentPattern)
	case p.NodeID != "" && !ident.ID.MatchString(p.NodeID):
		return badID("node_id", ident.ID)
	case p.JobID != "" && !engine.JobIDPattern.MatchString(p.JobID):
		return badID("job_id", engine.JobIDPattern)
	}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > LeaseListLimitMax {
			return badRequest("limit", "must be an integer in 1..%d", LeaseListLimitMax)
		}
		p.Limit = n
	}
	return nil
}

// leaseError turns the lease manager's refusals into API errors: a denial is a 409 whose code
// is its reason, an ended lease a 410, a job's lease a 409, a lease over its agent's GPU quota
// a 429 (its Retry-After set by the caller).
func leaseError(err error) error {
	var (
		gone  *leases.GoneError
		quota *leases.QuotaError
	)
	switch d, isDenial := leases.IsDenial(err); {
	case isDenial:
		return &Error{Status: http.StatusConflict, Code: d.Reason, Message: d.Message}
	case errors.As(err, &quota):
		return &Error{Status: http.StatusTooManyRequests, Code: wire.CodeQuota, Message: quota.Message}
	case errors.As(err, &gone):
		code := wire.CodeLeaseExpired
		if gone.Status == store.LeaseReleased {
			code = wire.CodeLeaseReleased
		}
		return &Error{Status: http.StatusGone, Code: code, Message: gone.Error() + "; it cannot be renewed, take a new one"}
	case errors.Is(err, leases.ErrBoundToJob):
		return &Error{Status: http.StatusConflict, Code: wire.CodeLeaseBoundToJob, Message: leases.ErrBoundToJob.Error()}
	case errors.Is(err, store.ErrNotFound):
		return notFound("no such lease")
	}
	return err
}

// leaseToWire converts a lease row to its wire form, times in UTC.
func leaseToWire(l store.Lease) wire.Lease {
	return wire.Lease{
		Token: l.Token, Agent: l.Agent, JobID: l.JobID, NodeID: l.NodeID, GPUIndex: l.GPUIndex, GPUIndexes: l.GPUIndexes,
		Mode: string(l.Mode), MemoryMB: l.MemoryMB, Exclusive: l.Exclusive, TTL: wire.Duration(l.TTL),
		Status: string(l.Status), CreatedAt: l.CreatedAt.UTC(), ExpiresAt: l.ExpiresAt.UTC(),
		LastHeartbeat: l.LastHeartbeat.UTC(), EndedAt: utcPtr(l.EndedAt), Metadata: rawOrNil(l.Metadata),
	}
}

// errAllLeasesExpired answers a completion whose every result carries an expired lease: a
// zombie worker's late report. Nothing was recorded.
func errAllLeasesExpired(n int) error {
	return &Error{Status: http.StatusConflict, Code: wire.CodeLeaseExpired, Message: fmt.Sprintf(
		"refused: the lease of every result (%d) expired, and the jobs were handed to other workers; drop the results", n)}
}
