package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

// withApprovers adds approver tokens "ann" and "ben" to the bundle's server.
func (b *bundle) withApprovers(t *testing.T) {
	t.Helper()
	var lines []string
	for _, who := range []string{"ann", "ben"} {
		token, line, err := NewToken(TokenRecord{Role: RoleApprover, Name: who})
		require.NoError(t, err)
		b.tokens[who] = token
		lines = append(lines, line)
	}
	for _, who := range []struct{ name, role, agent string }{{"alice", "agent", "alice"}, {"worker", "worker", ""}, {"admin", "admin", ""}} {
		token, line, err := NewToken(TokenRecord{Role: Role(who.role), Agent: who.agent})
		require.NoError(t, err)
		b.tokens[who.name] = token
		lines = append(lines, line)
	}
	set, err := LoadTokens("", strings.Join(lines, ";"))
	require.NoError(t, err)
	b.srv.SetTokens(set)
}

// TestApprovalsAPI: admins set policies (agents may not); a matching submit is held; only an
// approver or an admin lists and decides (an agent's or a worker's token is a 403); a reason
// is required; the same approver twice is a 409; two keys release the job; a rejection
// cancels it.
func TestApprovalsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.withApprovers(t)
	policy := map[string]any{"name": "sleepy", "type": "sleep", "two_key": true, "ttl_seconds": 3600}
	requireError(t, b.request(t, http.MethodPut, "/approvals/policies", "alice", policy), http.StatusForbidden, CodeForbidden, "")
	requireError(t, b.request(t, http.MethodPut, "/approvals/policies", "admin", map[string]any{"name": "all"}),
		http.StatusBadRequest, CodeInvalidRequest, "type")
	requireError(t, b.request(t, http.MethodPut, "/approvals/policies", "admin", map[string]any{"name": "x", "type": "sleep", "ttl_seconds": 99999999}),
		http.StatusBadRequest, CodeInvalidRequest, "ttl_seconds")
	rec := b.request(t, http.MethodPut, "/approvals/policies", "admin", policy)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.True(t, decode[wire.ApprovalPolicy](t, rec).TwoKey)
	rec = b.request(t, http.MethodGet, "/approvals/policies", "ann", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Len(t, decode[wire.ApprovalPolicyList](t, rec).Policies, 1)

	submit := func(id string) {
		t.Helper()
		rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", map[string]any{"job_id": id, "type": "sleep", "payload": map[string]any{}})
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		require.Equal(t, "awaiting_approval", decode[wire.SubmitResponse](t, rec).Status)
	}
	submit("held")
	reason := map[string]any{"reason": "looks fine"}
	for _, who := range []string{"alice", "worker"} {
		requireError(t, b.request(t, http.MethodPost, "/jobs/held/approve", who, reason), http.StatusForbidden, CodeForbidden, "")
		requireError(t, b.request(t, http.MethodGet, "/approvals", who, nil), http.StatusForbidden, CodeForbidden, "")
	}
	rec = b.request(t, http.MethodGet, "/approvals", "ann", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	list := decode[wire.ApprovalList](t, rec)
	require.Len(t, list.Approvals, 1)
	require.Equal(t, wire.Approval{JobID: "held", Type: "sleep", Agent: "alice", Policy: "sleepy", Required: 2, Status: "waiting",
		ExpiresAt: list.Approvals[0].ExpiresAt, OnExpiry: "reject", CreatedAt: list.Approvals[0].CreatedAt, Decisions: []wire.ApprovalDecision{}},
		list.Approvals[0])
	rec = b.request(t, http.MethodGet, "/jobs/held", "ann", nil)
	require.Equal(t, http.StatusOK, rec.Code, "an approver reads the job it decides on")

	requireError(t, b.request(t, http.MethodPost, "/jobs/held/approve", "ann", map[string]any{}), http.StatusBadRequest, CodeInvalidRequest, "reason")
	rec = b.request(t, http.MethodPost, "/jobs/held/approve", "ann", reason)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, wire.DecisionResponse{JobID: "held", JobStatus: "awaiting_approval", ApprovalStatus: "waiting", Approvals: 1, Required: 2},
		decode[wire.DecisionResponse](t, rec))
	requireError(t, b.request(t, http.MethodPost, "/jobs/held/approve", "ann", reason), http.StatusConflict, wire.CodeAlreadyDecided, "")
	rec = b.request(t, http.MethodPost, "/jobs/held/approve", "admin", reason)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "pending", decode[wire.DecisionResponse](t, rec).JobStatus)
	requireError(t, b.request(t, http.MethodPost, "/jobs/held/reject", "ben", reason), http.StatusConflict, wire.CodeNotAwaitingApproval, "")
	requireError(t, b.request(t, http.MethodPost, "/jobs/nope/reject", "ben", reason), http.StatusNotFound, CodeNotFound, "")

	submit("refused")
	rec = b.request(t, http.MethodPost, "/jobs/refused/reject", "ben", map[string]any{"reason": "too big"})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "cancelled", decode[wire.DecisionResponse](t, rec).JobStatus)
	rec = b.request(t, http.MethodGet, "/jobs/refused", "alice", nil)
	require.Equal(t, "rejected by approver:ben: too big", decode[wire.Job](t, rec).LastError)

	requireError(t, b.request(t, http.MethodDelete, "/approvals/policies/sleepy", "ann", nil), http.StatusForbidden, CodeForbidden, "")
	require.Equal(t, http.StatusNoContent, b.request(t, http.MethodDelete, "/approvals/policies/sleepy", "admin", nil).Code)
	requireError(t, b.request(t, http.MethodDelete, "/approvals/policies/sleepy", "admin", nil), http.StatusNotFound, CodeNotFound, "")
}

// TestApproverTokens: an approver token names its person; name= is for approvers only.
func TestApproverTokens(t *testing.T) {
	t.Parallel()
	_, line, err := NewToken(TokenRecord{Role: RoleApprover, Name: "ann"})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(line, " approver name=ann"), line)
	set, err := LoadTokens("", line)
	require.NoError(t, err)
	require.Equal(t, 1, set.Len())
	_, _, err = NewToken(TokenRecord{Role: RoleApprover})
	require.ErrorContains(t, err, "needs name=")
	_, _, err = NewToken(TokenRecord{Role: RoleAdmin, Name: "ann"})
	require.ErrorContains(t, err, "only for role approver")
	require.Equal(t, "approver:ann", Identity{Role: RoleApprover, Name: "ann"}.Actor())
}
