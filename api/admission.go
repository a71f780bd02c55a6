package api

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/admission"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// CheckAdmission is the /readyz entry of admission control: degraded while the limiter's Redis
// is unreachable (the entry says what fails open and what fails closed meanwhile).
const CheckAdmission = "admission"

// admissionBodyBytes bounds the body of PUT /control/admission.
const admissionBodyBytes = 4 << 10

// admittedJob is an admitted submit: finish must be called with the engine's outcome, which
// keeps or frees the job's place in its type's queue.
type admittedJob struct {
	s        *Server
	decision admission.Decision
}

// routedFrom is the requested type of a job admission routed to its CPU fallback, else "".
func (a admittedJob) routedFrom() string { return a.decision.RoutedFrom }

// finish reports whether the submit left a pending job (new, or the existing job of a
// repeated job_id).
func (a admittedJob) finish(pending bool) {
	if a.s.admission != nil {
		a.s.admission.Finished(a.decision, pending)
	}
}

// admitJob runs admission control on a checked submit, before anything is written. A job
// routed to its type's CPU fallback has p.Type changed; a refusal is the error to answer with
// (429, or 503 while the limiter fails closed), Retry-After already set.
func (s *Server) admitJob(c *gin.Context, p *engine.SubmitParams) (admittedJob, error) {
	adm, refused, err := s.decideJob(c.Request.Context(), p)
	switch {
	case err != nil:
		return admittedJob{}, err
	case refused != nil:
		return admittedJob{}, rejection(c, *refused)
	}
	return adm, nil
}

// decideJob is admitJob without the answer: a refusal comes back as its decision (refused),
// which the caller answers; a batch answers one per job, not with the request's status.
func (s *Server) decideJob(ctx context.Context, p *engine.SubmitParams) (adm admittedJob, refused *admission.Decision, err error) {
	if s.admission == nil {
		return admittedJob{s: s}, nil, nil
	}
	// The queue gate follows admitted submits by job id until they are written.
	generated := p.JobID == ""
	if generated {
		p.JobID = engine.NewJobID()
	}
	d, err := s.admission.AdmitJob(ctx, admission.JobRequest{Agent: p.Agent, Type: p.Type,
		JobID: p.JobID, IDGenerated: generated, GPU: p.Resources != nil && p.Resources.GPUMemoryMB > 0})
	if err != nil {
		return admittedJob{}, nil, err
	}
	if !d.Admitted {
		return admittedJob{}, &d, nil
	}
	if d.Routed() {
		// The fallback is a CPU type: what the submit asked of the GPUs goes with the GPU type.
		p.Type, p.Resources = d.Type, nil
	}
	return admittedJob{s: s, decision: d}, nil, nil
}

// admitLease runs admission control on a checked lease request.
func (s *Server) admitLease(c *gin.Context, p leases.GrantParams) error {
	if s.admission == nil {
		return nil
	}
	d, err := s.admission.AdmitLease(c.Request.Context(), admission.LeaseRequest{Agent: p.Agent, GPU: p.Mode == store.LeaseGPU})
	if err != nil {
		return err
	}
	if !d.Admitted {
		return rejection(c, d)
	}
	return nil
}

// rejection sets Retry-After and returns the answer of a refusal (rejectionError).
func rejection(c *gin.Context, d admission.Decision) error {
	setRetryAfter(c, d.RetryAfter)
	return rejectionError(d)
}

// rejectionError is the answer of a refusal: 429 with the reason as the code, or 503
// unavailable when the limiter failed closed (the cause is a dependency, not the client's rate).
func rejectionError(d admission.Decision) *Error {
	if d.Reason == admission.ReasonLimiterDown {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: d.Message}
	}
	return &Error{Status: http.StatusTooManyRequests, Code: string(d.Reason), Message: d.Message}
}

// setRetryAfter sets the Retry-After header to d in whole seconds, rounded up, at least 1.
func setRetryAfter(c *gin.Context, d time.Duration) {
	c.Header("Retry-After", strconv.Itoa(max(1, int(math.Ceil(d.Seconds())))))
}

// admissionReady is the /readyz entry of admission: its reason is shown, being free of
// addresses and secrets.
func (s *Server) admissionReady() error {
	var nr *admission.NotReadyError
	if err := s.admission.Ready(); errors.As(err, &nr) {
		return &CheckError{Reason: nr.Reason}
	} else if err != nil {
		return err
	}
	return nil
}

// errNoAdmission answers the admission routes of a server built without a controller.
var errNoAdmission = notFound("admission control is not running on this server")

// getAdmission handles GET /control/admission: the answering instance's policies, gates and
// limiter state.
func (s *Server) getAdmission(c *gin.Context) {
	if s.admission == nil {
		s.writeError(c, errNoAdmission)
		return
	}
	c.JSON(http.StatusOK, admissionStatusToWire(s.admission.Status()))
}

// putAdmission handles PUT /control/admission: 200 with the policy as stored. Absent fields
// keep their current values (see wire.AdmissionPolicyUpdate).
func (s *Server) putAdmission(c *gin.Context) {
	if s.admission == nil {
		s.writeError(c, errNoAdmission)
		return
	}
	var body wire.AdmissionPolicyUpdate
	if err := decodeJSON(c, admissionBodyBytes, &body); err != nil {
		s.writeError(c, err)
		return
	}
	if err := checkPolicyAgent(body.Agent); err != nil {
		s.writeError(c, err)
		return
	}
	p, err := s.admission.SetPolicy(c.Request.Context(), admission.PolicyUpdate{
		Agent: body.Agent, RatePerSec: body.RatePerSec, Burst: body.Burst, MaxPending: body.MaxPending,
		MaxGPUMemoryMB: body.MaxGPUMemoryMB, MaxGPUs: body.MaxGPUs, Enabled: body.Enabled, Actor: mustIdentity(c).Actor(),
	})
	var pe *admission.PolicyError
	if errors.As(err, &pe) {
		err = badRequest(pe.Field, "%s", pe.Message)
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, policyToWire(p, true))
}

// deleteAdmission handles DELETE /control/admission/:agent: 204; the agent falls back to the
// default policy. 404 when it has no policy.
func (s *Server) deleteAdmission(c *gin.Context) {
	if s.admission == nil {
		s.writeError(c, errNoAdmission)
		return
	}
	agent := c.Param("agent")
	if err := checkPolicyAgent(agent); err != nil {
		s.writeError(c, err)
		return
	}
	err := s.admission.DeletePolicy(c.Request.Context(), agent, mustIdentity(c).Actor())
	if errors.Is(err, store.ErrNotFound) {
		err = notFound("agent %q has no admission policy", agent)
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// checkPolicyAgent accepts an agent name or "*" (the default policy).
func checkPolicyAgent(agent string) error {
	switch {
	case agent == "":
		return badRequest("agent", "is required (an agent name, or %q for the default policy)", wire.AdmissionDefaultAgent)
	case agent != store.AdmissionDefaultAgent && !engine.AgentPattern.MatchString(agent):
		return badRequest("agent", "must be %q or %s", wire.AdmissionDefaultAgent, engine.AgentPattern.Rule())
	}
	return nil
}

func policyToWire(p store.AdmissionPolicy, stored bool) wire.AdmissionPolicy {
	out := wire.AdmissionPolicy{Agent: p.Agent, RatePerSec: p.RatePerSec, Burst: p.Burst,
		MaxPending: p.MaxPending, MaxGPUMemoryMB: p.MaxGPUMemoryMB, MaxGPUs: p.MaxGPUs, Enabled: p.Enabled}
	if stored {
		out.UpdatedAt = utcPtr(&p.UpdatedAt)
	}
	return out
}

func admissionStatusToWire(st admission.Status) wire.AdmissionStatus {
	out := wire.AdmissionStatus{
		Enabled:          st.Enabled,
		DefaultPolicy:    policyToWire(st.DefaultPolicy, st.DefaultFromTable),
		DefaultSource:    "config",
		Policies:         make([]wire.AdmissionPolicy, 0, len(st.Policies)),
		PoliciesLoadedAt: timePtr(st.PoliciesLoadedAt),
		Queues:           make([]wire.AdmissionQueue, 0, len(st.Queues)),
		RefreshInterval:  wire.Duration(st.RefreshInterval),
		Limiter: wire.AdmissionLimiter{State: "up", DownSince: timePtr(st.Limiter.DownSince),
			OnDownGPU: st.LimiterDownGPU, OnDownCPU: st.LimiterDownCPU},
	}
	if st.DefaultFromTable {
		out.DefaultSource = "table"
	}
	for _, p := range st.Policies {
		out.Policies = append(out.Policies, policyToWire(p, true))
	}
	for _, q := range st.Queues {
		out.Queues = append(out.Queues, wire.AdmissionQueue{Type: q.Type, Backlog: q.Backlog, Limit: q.Limit,
			Full: q.Full, CPUFallback: q.CPUFallback})
	}
	if !st.Limiter.Up {
		out.Limiter.State = "down"
		if st.Limiter.Err != nil {
			out.Limiter.Error = st.Limiter.Err.Error()
		}
	}
	g, p := st.GPU, st.GPU.Pressure
	out.GPU = wire.AdmissionGPUGate{
		State: wire.GateOpen, PressurePct: pct(p.Ratio), UsedMB: p.UsedMB, TotalMB: p.TotalMB,
		FreshGPUs: p.FreshGPUs, StaleGPUs: p.StaleGPUs, HighWatermarkPct: g.HighPct, LowWatermarkPct: g.LowPct,
		Hold: wire.Duration(g.Hold), ClosedSince: timePtr(g.ClosedSince), HoldUntil: timePtr(g.HoldUntil),
		MeasuredAt: timePtr(p.MeasuredAt), Nodes: make([]wire.AdmissionNodePressure, 0, len(p.Nodes)),
	}
	if g.Closed {
		out.GPU.State = wire.GateClosed
	}
	for _, n := range p.Nodes {
		out.GPU.Nodes = append(out.GPU.Nodes, wire.AdmissionNodePressure{NodeID: n.NodeID, PressurePct: pct(n.Ratio),
			UsedMB: n.UsedMB, TotalMB: n.TotalMB, GPUs: n.GPUs, Fresh: n.Fresh, Age: wire.Duration(n.Age)})
	}
	return out
}

// pct is a ratio as a percentage with two decimals.
func pct(ratio float64) float64 { return math.Round(ratio*10000) / 100 }

// timePtr is t in UTC, or nil for the zero time.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return utcPtr(&t)
}
