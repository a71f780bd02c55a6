package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/engine"
)

// TestApprovalsCommands: an approver lists the held jobs, approves one, rejects another
// (--reason required); an agent's token is refused (exit 2); the policies show.
func TestApprovalsCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ann, annLine, err := api.NewToken(api.TokenRecord{Role: api.RoleApprover, Name: "ann"})
	require.NoError(t, err)
	tokens, err := api.LoadTokens("", annLine)
	require.NoError(t, err)
	opts := b.opts
	opts.Auth = api.AuthOptions{Tokens: tokens}
	approverURL := serve(t, opts)
	asAnn := func(args ...string) result {
		return orchctl(t, "", append([]string{"--api-url", approverURL, "--token", ann}, args...)...)
	}

	_, err = client.New(b.url, b.admin).SetApprovalPolicy(context.Background(), client.ApprovalPolicy{Name: "sleepy", Type: "sleep"})
	require.NoError(t, err)
	for _, id := range []string{"held-1", "held-2"} {
		_, _, err := b.eng.Submit(context.Background(), engine.SubmitParams{JobID: id, Type: "sleep", Agent: "alice",
			Payload: json.RawMessage(`{}`), Actor: "agent:alice"})
		require.NoError(t, err)
	}

	r := asAnn("approvals", "list")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Regexp(t, `held-1\s+sleep\s+alice\s+sleepy\s+0/1\s+waiting`, r.stdout)
	r = asAnn("approvals", "approve", "held-1")
	require.Equal(t, exitUsage, r.code, "%s", r)
	r = asAnn("approvals", "approve", "held-1", "--reason", "fine")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.stdout, "job held-1: pending (approval approved, 1/1 approvals)")
	r = asAnn("approvals", "reject", "held-2", "--reason", "no", "-o", "json")
	require.Equal(t, exitOK, r.code, "%s", r)
	var resp client.DecisionResponse
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, "cancelled", resp.JobStatus)
	require.Equal(t, exitAPI, asAnn("approvals", "reject", "held-2", "--reason", "again").code)

	r = orchctl(t, "", "--api-url", b.url, "--token", b.alice, "approvals", "list")
	require.Equal(t, exitAPI, r.code, "an agent's token may not: %s", r)
	r = asAnn("approvals", "policies")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Regexp(t, `sleepy\s+sleep\s+-\s+0\s+0\s+false\s+86400s\s+reject\s+admin:`, r.stdout)
}
