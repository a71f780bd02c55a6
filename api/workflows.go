package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// workflowBodyBytes bounds the body of POST /workflows: up to engine.MaxWorkflowSteps steps,
// each with a payload of its own.
const workflowBodyBytes = 16 << 20

// workflowBody is wire.WorkflowRequest with its steps' timeouts kept raw (see submitBody).
type workflowBody struct {
	WorkflowID string       `json:"workflow_id"`
	Agent      string       `json:"agent"`
	Steps      []stepBody   `json:"steps"`
	Phases     [][]stepBody `json:"phases"`
	FanOut     *wire.FanOut `json:"fan_out"`
}

// stepBody is wire.WorkflowStep with its timeout kept raw.
type stepBody struct {
	Name            string            `json:"name"`
	Needs           []string          `json:"needs"`
	OnParentFailure string            `json:"on_parent_failure"`
	Type            string            `json:"type"`
	Payload         json.RawMessage   `json:"payload"`
	MaxAttempts     *int              `json:"max_attempts"`
	Timeout         json.RawMessage   `json:"timeout"`
	Resources       *wire.Resources   `json:"resources"`
	Priority        *int              `json:"priority"`
	Constraints     *wire.Constraints `json:"constraints"`
	PoolID          string            `json:"pool_id"`
	ModelID         string            `json:"model_id"`
	FanOut          *wire.FanOut      `json:"fan_out"`
}

// submitWorkflow handles POST /workflows: 202 for a new workflow, 200 for a workflow_id that
// exists. Every step is checked as a submit (a 400 names "steps[i].field" or
// "phases[i][j].field") and passes admission as one.
func (s *Server) submitWorkflow(c *gin.Context) {
	id := mustIdentity(c)
	var body workflowBody
	if err := decodeJSON(c, workflowBodyBytes, &body); err != nil {
		s.writeError(c, err)
		return
	}
	p, err := s.workflowParams(id, body)
	if err != nil {
		s.writeError(c, err)
		return
	}
	adms, err := s.admitSteps(c, p.Steps)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out, err := s.engine.SubmitWorkflow(c.Request.Context(), p)
	for _, a := range adms {
		a.finish(err == nil && out.Created) // a step's job may be waiting: its place is kept either way
	}
	if err != nil {
		s.writeError(c, submitError(err))
		return
	}
	status := http.StatusOK
	if out.Created {
		status = http.StatusAccepted
	}
	resp := wire.WorkflowResponse{WorkflowID: out.Workflow.ID, Status: string(out.Workflow.Status), Created: out.Created,
		Steps: make([]wire.WorkflowStepRef, 0, len(out.Steps))}
	for _, st := range out.Steps {
		resp.Steps = append(resp.Steps, wire.WorkflowStepRef{Name: st.Step, JobID: st.JobID})
	}
	c.JSON(status, resp)
}

// workflowParams checks a workflow body and binds it to the caller as a submit is bound: an
// agent token submits for its own agent only.
func (s *Server) workflowParams(id Identity, b workflowBody) (engine.WorkflowParams, error) {
	agent, err := bindAgent(id, b.Agent, "submits")
	if err != nil {
		return engine.WorkflowParams{}, err
	}
	if b.WorkflowID != "" && !engine.WorkflowIDPattern.MatchString(b.WorkflowID) {
		return engine.WorkflowParams{}, badID("workflow_id", engine.WorkflowIDPattern)
	}
	asked := b
	asked.WorkflowID, asked.Agent = "", agent // the id is the key; the agent as bound
	spec, _ := json.Marshal(asked)            // decoded from JSON: it encodes again
	p := engine.WorkflowParams{WorkflowID: b.WorkflowID, Agent: agent, Actor: id.Actor(), Spec: spec}
	type placed struct {
		body  stepBody
		field string
		phase int
		needs []string
	}
	var steps []placed
	switch {
	case len(b.Steps) > 0 && len(b.Phases) > 0:
		return p, badRequest("phases", "give steps or phases, not both")
	case len(b.Phases) > 0:
		var before []string
		for i, phase := range b.Phases {
			if len(phase) == 0 {
				return p, badRequest(fmt.Sprintf("phases[%d]", i), "is empty: a phase has at least one step")
			}
			var names []string
			for j, st := range phase {
				field := fmt.Sprintf("phases[%d][%d]", i, j)
				if len(st.Needs) > 0 {
					return p, badRequest(field+".needs", "a step of a phase needs every step of the phase before: it names none")
				}
				steps = append(steps, placed{body: st, field: field, phase: i, needs: before})
				names = append(names, st.Name)
			}
			before = names
		}
	default:
		for i, st := range b.Steps {
			steps = append(steps, placed{body: st, field: fmt.Sprintf("steps[%d]", i), needs: st.Needs})
		}
	}
	if len(steps) > engine.MaxWorkflowSteps {
		return p, badRequest("steps", "has %d steps, over the limit of %d", len(steps), engine.MaxWorkflowSteps)
	}
	for _, st := range steps {
		sp, err := s.stepParams(id, agent, st.body, b.FanOut)
		if err != nil {
			return p, prefixField(st.field, err)
		}
		p.Steps = append(p.Steps, engine.WorkflowStepParams{Name: st.body.Name, Needs: st.needs, Phase: st.phase, Job: sp, Field: st.field})
	}
	return p, nil
}

// stepParams checks one step's job as a submit of agent; fanOut is the workflow's, which a
// step's own replaces.
func (s *Server) stepParams(id Identity, agent string, st stepBody, fanOut *wire.FanOut) (engine.SubmitParams, error) {
	if st.FanOut != nil {
		fanOut = st.FanOut
	}
	sp, err := s.submitParams(id, submitBody{Type: st.Type, Agent: agent, Payload: st.Payload, MaxAttempts: st.MaxAttempts,
		Timeout: st.Timeout, Resources: st.Resources, Priority: st.Priority, Constraints: st.Constraints, PoolID: st.PoolID,
		ModelID: st.ModelID, FanOut: fanOut})
	if err != nil {
		return sp, err
	}
	sp.OnParentFailure = st.OnParentFailure
	return sp, nil
}

// bindAgent is the agent a request of id acts for: an agent token's own (filled in when the
// request names none; another is a 403), or the one an admin names.
func bindAgent(id Identity, asked, verb string) (string, error) {
	if id.Role == RoleAgent {
		switch asked {
		case "", id.Agent:
			return id.Agent, nil
		default:
			return "", forbidden("this token %s for agent %q only", verb, id.Agent)
		}
	}
	if asked == "" {
		return "", badRequest("agent", "is required")
	}
	if !engine.AgentPattern.MatchString(asked) {
		return "", badID("agent", engine.AgentPattern)
	}
	return asked, nil
}

// prefixField names err's field within the request part prefix ("steps[2]" + ".type").
func prefixField(prefix string, err error) error {
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusBadRequest {
		out := *apiErr
		out.Field = strings.TrimSuffix(prefix+"."+apiErr.Field, ".")
		return &out
	}
	return err
}

// admitSteps runs admission control on every step's job, as on so many submits: a refusal of
// any refuses the workflow (and gives back the places of those admitted).
func (s *Server) admitSteps(c *gin.Context, steps []engine.WorkflowStepParams) ([]admittedJob, error) {
	adms := make([]admittedJob, 0, len(steps))
	for i := range steps {
		a, err := s.admitJob(c, &steps[i].Job)
		if err != nil {
			for _, a := range adms {
				a.finish(false)
			}
			return nil, err
		}
		adms = append(adms, a)
	}
	return adms, nil
}

// getWorkflow handles GET /workflows/:id. An agent sees its own agent's workflows only
// (another's is a 404).
func (s *Server) getWorkflow(c *gin.Context) {
	w, steps, err := s.visibleWorkflow(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := workflowToWire(w)
	out.Request = w.Spec
	for _, st := range steps {
		status := string(st.JobStatus)
		if status == "" {
			status = "gone"
		}
		needs := st.Needs
		if needs == nil {
			needs = []string{}
		}
		out.Steps = append(out.Steps, wire.WorkflowState{Name: st.Step, JobID: st.JobID, Needs: needs, Phase: st.Phase, JobStatus: status})
	}
	c.JSON(http.StatusOK, out)
}

// visibleWorkflow loads the workflow of the :id path parameter if the caller may see it.
func (s *Server) visibleWorkflow(c *gin.Context) (store.Workflow, []store.WorkflowStepState, error) {
	wid := c.Param("id")
	if !engine.WorkflowIDPattern.MatchString(wid) {
		return store.Workflow{}, nil, notFound("no workflow %q", wid)
	}
	w, steps, err := s.engine.GetWorkflow(c.Request.Context(), wid)
	if errors.Is(err, store.ErrNotFound) {
		return store.Workflow{}, nil, notFound("no workflow %q", wid)
	}
	if err != nil {
		return store.Workflow{}, nil, err
	}
	if scope := agentScope(mustIdentity(c)); scope != "" && w.Agent != scope {
		return store.Workflow{}, nil, notFound("no workflow %q", wid)
	}
	return w, steps, nil
}

// cancelWorkflow handles POST /workflows/:id/cancel: the steps not ended are cancelled; 409
// when the workflow has ended.
func (s *Server) cancelWorkflow(c *gin.Context) {
	w, _, err := s.visibleWorkflow(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	w, err = s.engine.CancelWorkflow(c.Request.Context(), w.ID, mustIdentity(c).Actor())
	if errors.Is(err, engine.ErrWorkflowEnded) {
		err = &Error{Status: http.StatusConflict, Code: CodeConflict, Message: fmt.Sprintf("workflow %s: %v", w.ID, err)}
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, workflowToWire(w))
}

// listWorkflows handles GET /workflows?status=&agent=&limit=&cursor=, newest first; an agent
// lists its own agent's only.
func (s *Server) listWorkflows(c *gin.Context) {
	p := store.WorkflowListParams{Status: store.WorkflowStatus(c.Query("status")), Agent: c.Query("agent"), Limit: ListLimitDefault}
	switch p.Status {
	case "", store.WorkflowRunning, store.WorkflowDone, store.WorkflowFailed, store.WorkflowCancelled:
	default:
		s.writeError(c, badRequest("status", "unknown workflow status %q", p.Status))
		return
	}
	if scope := agentScope(mustIdentity(c)); scope != "" {
		if p.Agent != "" && p.Agent != scope {
			s.writeError(c, forbidden("this token lists the workflows of agent %q only", scope))
			return
		}
		p.Agent = scope
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ListLimitMax {
			s.writeError(c, badRequest("limit", "must be an integer in 1..%d", ListLimitMax))
			return
		}
		p.Limit = n
	}
	if v := c.Query("cursor"); v != "" {
		cur, err := decodeCursor(v)
		if err != nil {
			s.writeError(c, err)
			return
		}
		p.BeforeAt, p.BeforeID = cur.CreatedAt, cur.ID
	}
	limit := p.Limit
	p.Limit++ // one more tells whether another page follows
	ws, err := s.engine.ListWorkflows(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.WorkflowList{Workflows: make([]wire.Workflow, 0, len(ws))}
	if len(ws) > limit {
		ws = ws[:limit]
		last := ws[len(ws)-1]
		out.NextCursor = encodeCursor(store.Job{ID: last.ID, CreatedAt: last.CreatedAt})
	}
	for _, w := range ws {
		out.Workflows = append(out.Workflows, workflowToWire(w))
	}
	c.JSON(http.StatusOK, out)
}

// workflowToWire is a workflow without its steps.
func workflowToWire(w store.Workflow) wire.Workflow {
	return wire.Workflow{WorkflowID: w.ID, Agent: w.Agent, Status: string(w.Status), CreatedAt: w.CreatedAt.UTC(),
		UpdatedAt: w.UpdatedAt.UTC(), FinishedAt: utcPtr(w.FinishedAt), Steps: []wire.WorkflowState{}}
}
