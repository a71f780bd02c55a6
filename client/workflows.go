package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpuorch/orchestrator/wire"
)

// The wire types of workflows and fan-outs.
type (
	// WorkflowRequest is wire.WorkflowRequest.
	WorkflowRequest = wire.WorkflowRequest
	// WorkflowStep is wire.WorkflowStep.
	WorkflowStep = wire.WorkflowStep
	// WorkflowResponse is wire.WorkflowResponse.
	WorkflowResponse = wire.WorkflowResponse
	// WorkflowStepRef is wire.WorkflowStepRef.
	WorkflowStepRef = wire.WorkflowStepRef
	// Workflow is wire.Workflow.
	Workflow = wire.Workflow
	// WorkflowState is wire.WorkflowState.
	WorkflowState = wire.WorkflowState
	// WorkflowList is wire.WorkflowList.
	WorkflowList = wire.WorkflowList
	// FanOut is wire.FanOut.
	FanOut = wire.FanOut
	// Parent is wire.Parent.
	Parent = wire.Parent
)

// SubmitWorkflow submits a workflow (POST /workflows); Created is false for a workflow_id that
// existed.
func (c *Client) SubmitWorkflow(ctx context.Context, req WorkflowRequest) (WorkflowResponse, error) {
	return call[WorkflowResponse](ctx, c, http.MethodPost, "/workflows", nil, req, "submit workflow")
}

// GetWorkflow returns a workflow with its steps (GET /workflows/{id}).
func (c *Client) GetWorkflow(ctx context.Context, id string) (Workflow, error) {
	return call[Workflow](ctx, c, http.MethodGet, "/workflows/"+url.PathEscape(id), nil, nil, "get workflow "+id)
}

// CancelWorkflow cancels a running workflow's steps that have not ended (POST
// /workflows/{id}/cancel).
func (c *Client) CancelWorkflow(ctx context.Context, id string) (Workflow, error) {
	return call[Workflow](ctx, c, http.MethodPost, "/workflows/"+url.PathEscape(id)+"/cancel", nil, nil, "cancel workflow "+id)
}

// ListWorkflowsParams filters GET /workflows.
type ListWorkflowsParams struct {
	Status string
	Agent  string
	Limit  int
	Cursor string
}

// ListWorkflows returns a page of workflows, newest first (GET /workflows).
func (c *Client) ListWorkflows(ctx context.Context, p ListWorkflowsParams) (WorkflowList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": p.Status, "agent": p.Agent, "cursor": p.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	return call[WorkflowList](ctx, c, http.MethodGet, "/workflows", q, nil, "list workflows")
}
