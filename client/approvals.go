package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuorch/orchestrator/wire"
)

// The wire types of approvals.
type (
	// Approval is wire.Approval.
	Approval = wire.Approval
	// ApprovalList is wire.ApprovalList.
	ApprovalList = wire.ApprovalList
	// ApprovalDecision is wire.ApprovalDecision.
	ApprovalDecision = wire.ApprovalDecision
	// DecisionRequest is wire.DecisionRequest.
	DecisionRequest = wire.DecisionRequest
	// DecisionResponse is wire.DecisionResponse.
	DecisionResponse = wire.DecisionResponse
	// ApprovalPolicy is wire.ApprovalPolicy.
	ApprovalPolicy = wire.ApprovalPolicy
	// ApprovalPolicyList is wire.ApprovalPolicyList.
	ApprovalPolicyList = wire.ApprovalPolicyList
)

// ListApprovals returns the jobs held for approval (GET /approvals; agent "" for all).
func (c *Client) ListApprovals(ctx context.Context, agent string) (ApprovalList, error) {
	q := url.Values{}
	if agent != "" {
		q.Set("agent", agent)
	}
	return call[ApprovalList](ctx, c, http.MethodGet, "/approvals", q, nil, "list approvals")
}

// ApproveJob records the caller's approval of a held job (POST /jobs/{id}/approve).
func (c *Client) ApproveJob(ctx context.Context, id, reason string) (DecisionResponse, error) {
	return call[DecisionResponse](ctx, c, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/approve", nil,
		DecisionRequest{Reason: reason}, "approve job "+id)
}

// RejectJob rejects a held job, which is cancelled (POST /jobs/{id}/reject).
func (c *Client) RejectJob(ctx context.Context, id, reason string) (DecisionResponse, error) {
	return call[DecisionResponse](ctx, c, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/reject", nil,
		DecisionRequest{Reason: reason}, "reject job "+id)
}

// ListApprovalPolicies returns the approval policies in force (GET /approvals/policies).
func (c *Client) ListApprovalPolicies(ctx context.Context) (ApprovalPolicyList, error) {
	return call[ApprovalPolicyList](ctx, c, http.MethodGet, "/approvals/policies", nil, nil, "list approval policies")
}

// SetApprovalPolicy writes one approval policy (PUT /approvals/policies).
func (c *Client) SetApprovalPolicy(ctx context.Context, p ApprovalPolicy) (ApprovalPolicy, error) {
	return call[ApprovalPolicy](ctx, c, http.MethodPut, "/approvals/policies", nil, p, "set approval policy "+p.Name)
}

// DeleteApprovalPolicy deletes an approval policy set at run time (DELETE
// /approvals/policies/{name}).
func (c *Client) DeleteApprovalPolicy(ctx context.Context, name string) error {
	err := c.do(ctx, http.MethodDelete, "/approvals/policies/"+url.PathEscape(name), nil, nil, nil)
	return wrap(err, "delete approval policy "+name)
}
