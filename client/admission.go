package client

import (
	"context"
	"net/http"
	"net/url"
)

// GetAdmission returns the admission state of the answering instance (GET /control/admission,
// admin).
func (c *Client) GetAdmission(ctx context.Context) (AdmissionStatus, error) {
	return call[AdmissionStatus](ctx, c, http.MethodGet, "/control/admission", nil, nil, "get admission")
}

// SetAdmissionPolicy writes an agent's policy (PUT /control/admission, admin) and returns it as
// stored. Every instance applies it within its refresh interval.
func (c *Client) SetAdmissionPolicy(ctx context.Context, u AdmissionPolicyUpdate) (AdmissionPolicy, error) {
	return call[AdmissionPolicy](ctx, c, http.MethodPut, "/control/admission", nil, u, "set admission policy of "+u.Agent)
}

// DeleteAdmissionPolicy deletes an agent's policy (DELETE /control/admission/{agent}, admin):
// the agent falls back to the default policy.
func (c *Client) DeleteAdmissionPolicy(ctx context.Context, agent string) error {
	err := c.do(ctx, http.MethodDelete, "/control/admission/"+url.PathEscape(agent), nil, nil, nil)
	return wrap(err, "delete admission policy of "+agent)
}
