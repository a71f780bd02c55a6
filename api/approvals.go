package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// Limits of approvals.
const (
	// decisionReasonMax bounds a decision's reason.
	decisionReasonMax = 1024
	// approvalBodyBytes bounds the bodies of decisions and policies.
	approvalBodyBytes = 8 << 10
)

// listApprovals handles GET /approvals?agent=&limit= (approver, admin): the jobs held for
// approval, oldest first, with the decisions so far.
func (s *Server) listApprovals(c *gin.Context) {
	p := store.ApprovalListParams{Agent: c.Query("agent"), Limit: ListLimitMax}
	if p.Agent != "" && !engine.AgentPattern.MatchString(p.Agent) {
		s.writeError(c, badID("agent", engine.AgentPattern))
		return
	}
	list, err := s.engine.ListApprovals(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.ApprovalList{Approvals: make([]wire.Approval, 0, len(list))}
	for _, a := range list {
		w := wire.Approval{JobID: a.JobID, Type: a.Type, Agent: a.Agent, Policy: a.Policy, Required: a.Required,
			Status: string(a.Status), ExpiresAt: utcPtr(a.ExpiresAt), OnExpiry: string(a.OnExpiry), CreatedAt: a.CreatedAt.UTC(),
			Decisions: make([]wire.ApprovalDecision, 0, len(a.Decisions))}
		for _, d := range a.Decisions {
			w.Decisions = append(w.Decisions, wire.ApprovalDecision{Approver: d.Approver, Decision: d.Decision, Reason: d.Reason,
				DecidedAt: d.DecidedAt.UTC()})
		}
		out.Approvals = append(out.Approvals, w)
	}
	c.JSON(http.StatusOK, out)
}

// approveJob handles POST /jobs/:id/approve (approver, admin).
func (s *Server) approveJob(c *gin.Context) { s.decide(c, true) }

// rejectJob handles POST /jobs/:id/reject (approver, admin).
func (s *Server) rejectJob(c *gin.Context) { s.decide(c, false) }

// decide records the caller's decision on the :id job with the body's reason.
func (s *Server) decide(c *gin.Context, approve bool) {
	jobID := c.Param("id")
	if !engine.JobIDPattern.MatchString(jobID) {
		s.writeError(c, notFound("no job %q", jobID))
		return
	}
	var body wire.DecisionRequest
	if err := decodeJSON(c, approvalBodyBytes, &body); err != nil {
		s.writeError(c, err)
		return
	}
	switch {
	case body.Reason == "":
		s.writeError(c, badRequest("reason", "is required: the audit records why"))
		return
	case len(body.Reason) > decisionReasonMax:
		s.writeError(c, badRequest("reason", "is %d bytes, over the limit of %d", len(body.Reason), decisionReasonMax))
		return
	}
	id := mustIdentity(c)
	out, err := s.engine.Decide(c.Request.Context(), engine.DecideParams{JobID: jobID, Approve: approve, Reason: body.Reason,
		Actor: id.Actor(), Admin: id.Role == RoleAdmin})
	if err != nil {
		s.writeError(c, decisionError(jobID, err))
		return
	}
	c.JSON(http.StatusOK, wire.DecisionResponse{JobID: out.Job.ID, JobStatus: string(out.Job.Status),
		ApprovalStatus: string(out.Request.Status), Approvals: out.Approvals, Required: out.Request.Required})
}

// decisionError is the answer to a decision the engine refused.
func decisionError(jobID string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("no job %q", jobID)
	case errors.Is(err, engine.ErrNotAwaitingApproval):
		return &Error{Status: http.StatusConflict, Code: wire.CodeNotAwaitingApproval, Message: err.Error()}
	case errors.Is(err, engine.ErrAlreadyDecided):
		return &Error{Status: http.StatusConflict, Code: wire.CodeAlreadyDecided, Message: err.Error()}
	case errors.Is(err, engine.ErrApprovalExpired):
		return &Error{Status: http.StatusConflict, Code: wire.CodeApprovalExpired, Message: err.Error()}
	case errors.Is(err, engine.ErrEscalated):
		return forbidden("%s", err.Error())
	}
	return err
}

// listApprovalPolicies handles GET /approvals/policies (approver, admin).
func (s *Server) listApprovalPolicies(c *gin.Context) {
	ps := s.engine.ApprovalPolicies()
	out := wire.ApprovalPolicyList{Policies: make([]wire.ApprovalPolicy, 0, len(ps))}
	for _, p := range ps {
		out.Policies = append(out.Policies, approvalPolicyToWire(p))
	}
	c.JSON(http.StatusOK, out)
}

// putApprovalPolicy handles PUT /approvals/policies (admin): one policy, new or over the one
// of its name, in force on this instance at once and on the others within
// approvals.refresh_interval; audited approval.policy_set.
func (s *Server) putApprovalPolicy(c *gin.Context) {
	var body wire.ApprovalPolicy
	if err := decodeJSON(c, approvalBodyBytes, &body); err != nil {
		s.writeError(c, err)
		return
	}
	if body.UpdatedBy != "" || body.UpdatedAt != nil {
		s.writeError(c, badRequest("updated_by", "is set by the server"))
		return
	}
	if body.TTLSeconds < 0 || body.TTLSeconds > int64(engine.MaxApprovalTTL.Seconds()) {
		s.writeError(c, badRequest("ttl_seconds", "must be in 1..%d", int64(engine.MaxApprovalTTL.Seconds())))
		return
	}
	p, err := s.engine.SetApprovalPolicy(c.Request.Context(), store.ApprovalPolicy{Name: body.Name, Type: body.Type,
		Agent: body.Agent, MinGPUs: body.MinGPUs, MinGPUMemoryMB: body.MinGPUMemoryMB, TwoKey: body.TwoKey,
		TTL: time.Duration(body.TTLSeconds) * time.Second, OnExpiry: store.ApprovalExpiry(body.OnExpiry)}, mustIdentity(c).Actor())
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, approvalPolicyToWire(p))
}

// deleteApprovalPolicy handles DELETE /approvals/policies/:name (admin): 204, or 404 for a
// name the table does not hold (a policy of the configuration is changed in the configuration).
func (s *Server) deleteApprovalPolicy(c *gin.Context) {
	name := c.Param("name")
	if !engine.ApprovalPolicyNamePattern.MatchString(name) {
		s.writeError(c, notFound("no approval policy %q", name))
		return
	}
	err := s.engine.DeleteApprovalPolicy(c.Request.Context(), name, mustIdentity(c).Actor())
	if errors.Is(err, store.ErrNotFound) {
		err = notFound("no approval policy %q set at run time (a policy of the configuration is changed there)", name)
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// approvalPolicyToWire is an approval policy as the API shows it.
func approvalPolicyToWire(p store.ApprovalPolicy) wire.ApprovalPolicy {
	w := wire.ApprovalPolicy{Name: p.Name, Type: p.Type, Agent: p.Agent, MinGPUs: p.MinGPUs, MinGPUMemoryMB: p.MinGPUMemoryMB,
		TwoKey: p.TwoKey, TTLSeconds: int64(p.TTL.Seconds()), OnExpiry: string(p.OnExpiry), UpdatedBy: p.UpdatedBy}
	if !p.UpdatedAt.IsZero() {
		at := p.UpdatedAt.UTC()
		w.UpdatedAt = &at
	}
	return w
}
