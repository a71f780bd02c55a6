package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// Listing page sizes of GET /jobs.
const (
	ListLimitDefault = 50
	ListLimitMax     = 500
)

// submitBody is wire.SubmitRequest with the timeout kept raw, so that a malformed timeout is a
// 400 naming the field (the decoder drops the field name of a custom unmarshaler's error). A test
// keeps its JSON fields equal to the wire type's.
type submitBody struct {
	JobID       string            `json:"job_id"`
	Type        string            `json:"type"`
	Agent       string            `json:"agent"`
	Payload     json.RawMessage   `json:"payload"`
	MaxAttempts *int              `json:"max_attempts"`
	Timeout     json.RawMessage   `json:"timeout"`
	Resources   *wire.Resources   `json:"resources"`
	Priority    *int              `json:"priority"`
	Constraints *wire.Constraints `json:"constraints"`
	PoolID      string            `json:"pool_id"`
	ModelID     string            `json:"model_id"`
	CallbackURL string            `json:"callback_url"`
	DependsOn   []string          `json:"depends_on"`
	// OnParentFailure: cancel or run.
	OnParentFailure string       `json:"on_parent_failure"`
	FanOut          *wire.FanOut `json:"fan_out"`
}

// submit handles POST /jobs/submit: 202 for a new job, 200 for a job_id that exists already.
func (s *Server) submit(c *gin.Context) {
	id := mustIdentity(c)
	var body submitBody
	if err := decodeJSON(c, s.cfg.MaxPayloadBytes+submitEnvelopeBytes, &body); err != nil {
		s.writeError(c, err)
		return
	}
	p, err := s.submitParams(id, body)
	if err != nil {
		s.writeError(c, err)
		return
	}
	adm, err := s.admitJob(c, &p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	job, created, err := s.engine.Submit(c.Request.Context(), p)
	adm.finish(err == nil && job.Status == store.JobPending)
	if err != nil {
		s.writeError(c, submitError(err))
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusAccepted
	}
	resp := wire.SubmitResponse{JobID: job.ID, Status: string(job.Status), Created: created}
	if from := adm.routedFrom(); from != "" {
		resp.Type, resp.RoutedFrom = job.Type, from
	}
	c.JSON(status, resp)
}

// submitError is the answer to a submit the engine refused: a resubmit of an existing job_id
// with another request is a 409 idempotency_mismatch naming the first field that differs.
func submitError(err error) error {
	var mm *engine.MismatchError
	if errors.As(err, &mm) {
		return &Error{Status: http.StatusConflict, Code: CodeIdempotencyMismatch, Field: mm.Field,
			Message: fmt.Sprintf("job %s: %s", mm.JobID, mm.Message)}
	}
	return err
}

// submitParams checks a submit body and binds it to the caller: an agent token submits for its
// own agent only (filled in when the body names none); an admin names the agent.
func (s *Server) submitParams(id Identity, b submitBody) (engine.SubmitParams, error) {
	if id.Role == RoleAgent {
		switch b.Agent {
		case "":
			b.Agent = id.Agent
		case id.Agent:
		default:
			return engine.SubmitParams{}, forbidden("this token submits for agent %q only", id.Agent)
		}
	}
	// decodeJSON has checked the payload: a json.RawMessage holds a value the decoder read.
	p := engine.SubmitParams{JobID: b.JobID, Type: b.Type, Agent: b.Agent, Payload: b.Payload, PayloadChecked: true,
		PoolID: b.PoolID, ModelID: b.ModelID, Actor: id.Actor(), CallbackURL: b.CallbackURL, DependsOn: b.DependsOn,
		OnParentFailure: b.OnParentFailure}
	switch {
	case p.JobID != "" && !engine.JobIDPattern.MatchString(p.JobID):
		return p, badID("job_id", engine.JobIDPattern)
	case p.Type == "":
		return p, badRequest("type", "is required")
	case s.cfg.JobType(p.Type) == nil:
		return p, badRequest("type", "%s", engine.UnknownTypeMessage(s.cfg, p.Type))
	case p.Agent == "":
		return p, badRequest("agent", "is required")
	case !engine.AgentPattern.MatchString(p.Agent):
		return p, badID("agent", engine.AgentPattern)
	case len(p.Payload) == 0:
		return p, badRequest("payload", "is required (any JSON value, null included)")
	case int64(len(p.Payload)) > s.cfg.MaxPayloadBytes:
		return p, badRequest("payload", "is %d bytes, over the limit of %d", len(p.Payload), s.cfg.MaxPayloadBytes)
	}
	if b.MaxAttempts != nil {
		if *b.MaxAttempts < 1 || *b.MaxAttempts > engine.MaxAttemptsLimit {
			return p, badRequest("max_attempts", "must be in 1..%d", engine.MaxAttemptsLimit)
		}
		p.MaxAttempts = *b.MaxAttempts
	}
	if len(b.Timeout) > 0 && string(b.Timeout) != "null" {
		d, err := parseTimeout(b.Timeout)
		if err != nil {
			return p, err
		}
		p.Timeout = d
	}
	if b.Priority != nil {
		if *b.Priority < 0 || *b.Priority > engine.MaxPriority {
			return p, badRequest("priority", "must be in 0..%d", engine.MaxPriority)
		}
		p.Priority = b.Priority
	}
	if r := b.Resources; r != nil {
		p.Resources = &engine.Resources{GPUMemoryMB: r.GPUMemoryMB, GPUs: r.GPUs, Exclusive: r.Exclusive}
	}
	if c := b.Constraints; c != nil {
		p.Constraints = &store.Constraints{NodeSelector: c.NodeSelector, AllowNodes: c.AllowNodes, DenyNodes: c.DenyNodes,
			MaxPerNode: c.MaxPerNode}
	}
	p.FanOut = fanOutFromWire(b.FanOut)
	return p, nil
}

// fanOutFromWire is a submit's fan-out (nil: none).
func fanOutFromWire(f *wire.FanOut) *engine.FanOut {
	if f == nil {
		return nil
	}
	return &engine.FanOut{NodeSelector: f.NodeSelector, Nodes: f.Nodes, All: f.All, Strategy: f.Strategy}
}

// parseTimeout reads a submit's timeout: seconds (a number) or a Go duration string, in
// (0, engine.MaxTimeout]. A number of seconds is range-checked before it becomes a
// time.Duration, whose nanoseconds would overflow from about 292 years on.
func parseTimeout(raw json.RawMessage) (time.Duration, error) {
	bad := badRequest("timeout", "must be positive and at most %s (%d seconds)", engine.MaxTimeout, int(engine.MaxTimeout.Seconds()))
	if raw[0] != '"' {
		f, err := strconv.ParseFloat(string(raw), 64)
		switch {
		case err != nil && !errors.Is(err, strconv.ErrRange):
			return 0, badRequest("timeout", "want seconds or a duration like \"90s\"")
		case err != nil || !(f > 0 && f <= engine.MaxTimeout.Seconds()):
			return 0, bad
		}
		d := time.Duration(f * float64(time.Second))
		if d <= 0 {
			return 0, bad // under a nanosecond
		}
		return d, nil
	}
	var d wire.Duration
	if err := d.UnmarshalJSON(raw); err != nil {
		return 0, badRequest("timeout", "%s", err.Error())
	}
	if d <= 0 || time.Duration(d) > engine.MaxTimeout {
		return 0, bad
	}
	return time.Duration(d), nil
}

// postOnlyJobPaths are the names under /jobs/ of POST routes, which GET /jobs/:id matches too.
var postOnlyJobPaths = map[string]bool{"submit": true, "submit_batch": true}

// getJob handles GET /jobs/:id. An agent sees only its own agent's jobs: another agent's job is
// a 404, so ids of other agents cannot be probed.
func (s *Server) getJob(c *gin.Context) {
	job, err := s.visibleJob(c)
	if err != nil {
		if postOnlyJobPaths[c.Param("id")] {
			if status, _ := ErrorStatus(err); status == http.StatusNotFound {
				// GET /jobs/submit: the POST route's path, not a job (a job may be named so).
				c.Header("Allow", http.MethodPost)
				err = methodNotAllowed(c)
			}
		}
		s.writeError(c, err)
		return
	}
	out := jobToWire(job)
	if job.Flow.Has(store.FlowHasParents) {
		// Only a job that waits for others reads its dependencies.
		if err := s.flowOf(c, job, &out); err != nil {
			s.writeError(c, err)
			return
		}
	}
	c.JSON(http.StatusOK, out)
}

// flowOf adds to out what job waits for: its parents, or a fan-out parent's children by node.
func (s *Server) flowOf(c *gin.Context, job store.Job, out *wire.Job) error {
	parents, err := s.engine.Parents(c.Request.Context(), job.ID)
	if err != nil {
		return err
	}
	for _, p := range parents {
		if job.Flow.Has(store.FlowFanOut) {
			if out.FanOutChildren == nil {
				out.FanOutChildren = map[string]string{}
			}
			out.FanOutChildren[p.Label] = p.ParentID
			continue
		}
		out.DependsOn = append(out.DependsOn, p.ParentID)
	}
	return nil
}

// visibleJob loads the job of the :id path parameter if the caller may see it.
func (s *Server) visibleJob(c *gin.Context) (store.Job, error) {
	jobID := c.Param("id")
	if !engine.JobIDPattern.MatchString(jobID) {
		return store.Job{}, notFound("no job %q", jobID)
	}
	job, err := s.engine.Get(c.Request.Context(), jobID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Job{}, notFound("no job %q", jobID)
	}
	if err != nil {
		return store.Job{}, err
	}
	if scope := agentScope(mustIdentity(c)); scope != "" && job.Agent != scope {
		return store.Job{}, notFound("no job %q", jobID)
	}
	return job, nil
}

// cancelJob handles POST /jobs/:id/cancel: 200 with the cancelled job, 409 when it is terminal.
func (s *Server) cancelJob(c *gin.Context) {
	job, err := s.visibleJob(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	job, err = s.engine.Cancel(c.Request.Context(), job.ID, mustIdentity(c).Actor())
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, jobToWire(job))
}

// listJobs handles GET /jobs?status=&type=&agent=&limit=&cursor=, newest first. An agent token
// lists its own agent's jobs only.
func (s *Server) listJobs(c *gin.Context) {
	p, err := listParams(c, mustIdentity(c))
	if err != nil {
		s.writeError(c, err)
		return
	}
	jobs, next, ok := s.page(c, p.Limit, p.After, func(ctx context.Context, after *store.JobCursor, n int) ([]store.Job, error) {
		p.After, p.Limit = after, n
		return s.engine.List(ctx, p)
	})
	if !ok {
		return
	}
	out := wire.JobList{Jobs: make([]wire.Job, 0, len(jobs)), NextCursor: next}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, jobToWire(j))
	}
	c.JSON(http.StatusOK, out)
}

// listParams parses and checks the query of GET /jobs.
func listParams(c *gin.Context, id Identity) (store.JobListParams, error) {
	p := store.JobListParams{
		Status: store.JobStatus(c.Query("status")),
		Type:   c.Query("type"),
		Agent:  c.Query("agent"),
		Limit:  ListLimitDefault,
	}
	if p.Status != "" && !p.Status.Valid() {
		return p, badRequest("status", "unknown status %q", p.Status)
	}
	if len(p.Type) > 128 {
		return p, badRequest("type", "is longer than 128 bytes")
	}
	if scope := agentScope(id); scope != "" {
		if p.Agent != "" && p.Agent != scope {
			return p, forbidden("this token lists the jobs of agent %q only", scope)
		}
		p.Agent = scope
	}
	if p.Agent != "" && !engine.AgentPattern.MatchString(p.Agent) {
		return p, badID("agent", engine.AgentPattern)
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ListLimitMax {
			return p, badRequest("limit", "must be an integer in 1..%d", ListLimitMax)
		}
		p.Limit = n
	}
	if v := c.Query("cursor"); v != "" {
		cur, err := decodeCursor(v)
		if err != nil {
			return p, err
		}
		p.After = cur
	}
	return p, nil
}
