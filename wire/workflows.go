package wire

import (
	"encoding/json"
	"time"
)

// WorkflowRequest is the body of POST /workflows: named steps, each a job template with the
// steps it needs, or phases of steps with a barrier between phases (each step of a phase
// needs every step of the phase before). Exactly one of Steps and Phases.
type WorkflowRequest struct {
	// WorkflowID is a client-chosen stable id (1 to 64 of A-Z a-z 0-9 . _ : -); resubmitting
	// it with the same request returns the existing workflow. Generated when empty.
	WorkflowID string `json:"workflow_id,omitempty"`
	Agent      string `json:"agent,omitempty"`
	// Steps are the workflow's steps (at most 100), each needing any others.
	Steps []WorkflowStep `json:"steps,omitempty"`
	// Phases are the workflow's steps by phase: a phase starts once every step of the phase
	// before has ended done (a step of a phase may not name needs).
	Phases [][]WorkflowStep `json:"phases,omitempty"`
	// FanOut, when set, fans every step out to the node group (a step's own fan_out wins):
	// each step runs once per node, and the next phase starts when the previous one succeeded
	// on every node.
	FanOut *FanOut `json:"fan_out,omitempty"`
}

// WorkflowStep is one step: its name (1 to 63 of A-Z a-z 0-9 _ -, unique in the workflow;
// its job's id is "<workflow_id>.<name>"), the steps it needs, and its job, as a submit
// takes it (but job_id, agent and depends_on, which the workflow sets).
type WorkflowStep struct {
	Name  string   `json:"name"`
	Needs []string `json:"needs,omitempty"`
	// OnParentFailure is cancel (the default) or run: run the step once every step it needs
	// has ended, however they ended.
	OnParentFailure string          `json:"on_parent_failure,omitempty"`
	Type            string          `json:"type"`
	Payload         json.RawMessage `json:"payload"`
	MaxAttempts     *int            `json:"max_attempts,omitempty"`
	Timeout         *Duration       `json:"timeout,omitempty"`
	Resources       *Resources      `json:"resources,omitempty"`
	Priority        *int            `json:"priority,omitempty"`
	Constraints     *Constraints    `json:"constraints,omitempty"`
	PoolID          string          `json:"pool_id,omitempty"`
	ModelID         string          `json:"model_id,omitempty"`
	// FanOut runs the step once on each node of a group (see SubmitRequest.FanOut).
	FanOut *FanOut `json:"fan_out,omitempty"`
}

// WorkflowStepRef names a step's job.
type WorkflowStepRef struct {
	Name  string `json:"name"`
	JobID string `json:"job_id"`
}

// WorkflowResponse answers POST /workflows: 202 for a new workflow, 200 for an existing
// workflow_id.
type WorkflowResponse struct {
	WorkflowID string            `json:"workflow_id"`
	Status     string            `json:"status"`
	Created    bool              `json:"created"`
	Steps      []WorkflowStepRef `json:"steps"`
}

// Workflow states.
const (
	WorkflowRunning   = "running"
	WorkflowDone      = "done"
	WorkflowFailed    = "failed"
	WorkflowCancelled = "cancelled"
)

// Workflow is a workflow as GET /workflows/{id} shows it: its status (running, done,
// failed, cancelled), the graph of its steps and each step's job.
type Workflow struct {
	WorkflowID string          `json:"workflow_id"`
	Agent      string          `json:"agent"`
	Status     string          `json:"status"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	Steps      []WorkflowState `json:"steps"`
	// Request is the request as accepted.
	Request json.RawMessage `json:"request,omitempty"`
}

// WorkflowState is one step of a workflow with its job's status ("gone" once retention deleted
// the job).
type WorkflowState struct {
	Name      string   `json:"name"`
	JobID     string   `json:"job_id"`
	Needs     []string `json:"needs"`
	Phase     int      `json:"phase"`
	JobStatus string   `json:"job_status"`
}

// WorkflowList is a page of GET /workflows, newest first. NextCursor is empty on the last page.
type WorkflowList struct {
	Workflows  []Workflow `json:"workflows"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

// FanOut runs a job once on each node of a group: one child job pinned to each matching node,
// and a parent that ends once every child has (done, with the children's results by node; or
// failed, as the strategy says). Exactly one of NodeSelector, Nodes and All.
type FanOut struct {
	// NodeSelector: the ready nodes (registered, not cordoned, with a live worker of the job's
	// type) with each of these labels.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Nodes: these nodes (registered and not cordoned; at most 256).
	Nodes []string `json:"nodes,omitempty"`
	// All: every ready node.
	All bool `json:"all,omitempty"`
	// Strategy is fail_fast (the default: the first child that fails cancels the others
	// still pending or running) or continue (every child runs; the parent fails if any did).
	Strategy string `json:"strategy,omitempty"`
}
