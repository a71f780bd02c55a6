package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// withPolicies rebuilds b's engine with the configuration's approval policies ps.
func withPolicies(b *bundle, ps ...config.ApprovalPolicy) {
	b.cfg.Approvals.Policies = ps
	withWakes(b)
}

// submitTyped submits a job of type typ with id.
func (b *bundle) submitTyped(t *testing.T, id, typ string, parents ...string) store.Job {
	t.Helper()
	job, _, err := b.eng.Submit(context.Background(), engine.SubmitParams{JobID: id, Type: typ, Agent: "tester",
		Payload: json.RawMessage(`{}`), Actor: "agent:tester", DependsOn: parents})
	require.NoError(t, err)
	b.eng.FlushMarks(context.Background())
	return job
}

func (b *bundle) decide(t *testing.T, id, actor string, approve bool) (engine.DecideOutcome, error) {
	t.Helper()
	return b.eng.Decide(context.Background(), engine.DecideParams{JobID: id, Approve: approve, Reason: "because " + actor,
		Actor: actor, Admin: actor == "admin:x"})
}

// TestApprovals, on MariaDB and SQLite: a policy-matching job is held (never claimed) until
// approved; two-key needs two distinct approvers (the same one twice is refused); a
// rejection cancels the job with the reason; an approved job with parents goes on to wait for
// them; a cancel withdraws the request; a policy set at run time applies at once.
func TestApprovals(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		withPolicies(b,
			config.ApprovalPolicy{Name: "sleepy", Type: "sleep", TTL: time.Hour, OnExpiry: "reject"},
			config.ApprovalPolicy{Name: "risky", Type: "ingest", TwoKey: true, TTL: time.Minute, OnExpiry: "escalate"})

		held := b.submitTyped(t, "held", "sleep")
		require.Equal(t, store.JobAwaitingApproval, held.Status)
		require.Equal(t, store.FlowApproval, held.Flow)
		ev := b.auditEvent(t, "held", engine.EventApprovalRequested)
		require.Equal(t, "policy:sleepy", ev.Actor)
		c, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w", Items: []engine.ClaimItem{{JobID: "held", Stream: "sleep"}}})
		require.NoError(t, err)
		require.Empty(t, c.Claimed, "a job awaiting approval is never claimed")
		require.Equal(t, store.JobPending, b.submitTyped(t, "plain", "noop").Status, "no policy matches")

		list, err := b.eng.ListApprovals(ctx, store.ApprovalListParams{})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "sleep", list[0].Type)

		out, err := b.decide(t, "held", "approver:ann", true)
		require.NoError(t, err)
		require.Equal(t, store.JobPending, out.Job.Status)
		require.Equal(t, store.ApprovalApproved, out.Request.Status)
		require.True(t, b.job(t, "held").Enqueued, "an approved job is published")
		ev = b.auditEvent(t, "held", engine.EventApproved)
		require.Equal(t, "approver:ann", ev.Actor)
		require.JSONEq(t, `{"approver":"approver:ann","reason":"because approver:ann","policy":"sleepy","approvals":1,"required":1,"final":true}`,
			string(ev.Details))
		_, err = b.decide(t, "held", "approver:bob", true)
		require.ErrorIs(t, err, engine.ErrNotAwaitingApproval)
		_, err = b.decide(t, "plain", "approver:bob", true)
		require.ErrorIs(t, err, engine.ErrNotAwaitingApproval)

		// Two keys: the same approver twice is refused; a second one releases the job.
		b.submitTyped(t, "two", "ingest")
		out, err = b.decide(t, "two", "approver:ann", true)
		require.NoError(t, err)
		require.Equal(t, store.JobAwaitingApproval, out.Job.Status)
		require.Equal(t, 1, out.Approvals)
		_, err = b.decide(t, "two", "approver:ann", true)
		require.ErrorIs(t, err, engine.ErrAlreadyDecided)
		out, err = b.decide(t, "two", "approver:bob", true)
		require.NoError(t, err)
		require.Equal(t, store.JobPending, out.Job.Status)
		require.Equal(t, 2, out.Approvals)

		// A rejection cancels the job with the reason.
		b.submitTyped(t, "no", "sleep")
		out, err = b.decide(t, "no", "approver:ann", false)
		require.NoError(t, err)
		require.Equal(t, store.JobCancelled, out.Job.Status)
		require.Equal(t, store.ApprovalRejected, out.Request.Status)
		no := b.job(t, "no")
		require.Equal(t, "rejected by approver:ann: because approver:ann", no.LastError)
		require.Contains(t, b.auditTypes(t, "no"), engine.EventRejected)
		require.Contains(t, b.auditTypes(t, "no"), engine.TransitionEvent(store.JobAwaitingApproval, store.JobCancelled))

		// Approved with parents still going: it waits for them.
		b.submitTyped(t, "parent", "noop")
		gated := b.submitTyped(t, "gated", "sleep", "parent")
		require.Equal(t, store.JobAwaitingApproval, gated.Status)
		out, err = b.decide(t, "gated", "approver:ann", true)
		require.NoError(t, err)
		require.Equal(t, store.JobWaiting, out.Job.Status)
		b.finishJob(t, "parent", true, `1`)
		require.Equal(t, engine.ResolveResult{Released: 1}, b.resolve(t))

		// A cancel withdraws the request.
		b.submitTyped(t, "withdrawn", "sleep")
		_, err = b.eng.Cancel(ctx, "withdrawn", "agent:tester")
		require.NoError(t, err)
		list, err = b.eng.ListApprovals(ctx, store.ApprovalListParams{})
		require.NoError(t, err)
		require.Empty(t, list)

		// A policy set at run time holds the next submit at once; deleted, it no longer does.
		_, err = b.eng.SetApprovalPolicy(ctx, store.ApprovalPolicy{Name: "noops", Type: "noop"}, "admin:x")
		require.NoError(t, err)
		require.Equal(t, store.JobAwaitingApproval, b.submitTyped(t, "noop-held", "noop").Status)
		require.NoError(t, b.eng.DeleteApprovalPolicy(ctx, "noops", "admin:x"))
		require.Equal(t, store.JobPending, b.submitTyped(t, "noop-free", "noop").Status)
		require.ErrorIs(t, b.eng.DeleteApprovalPolicy(ctx, "noops", "admin:x"), store.ErrNotFound)
	})
}

// TestApprovalsExpire, on MariaDB and SQLite: a request past its TTL is rejected (the job
// cancelled, job.approval_expired) or escalated (job.approval_escalated; then an approver is
// refused and an admin decides); a fenced expirer changes nothing.
func TestApprovalsExpire(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		withPolicies(b,
			config.ApprovalPolicy{Name: "sleepy", Type: "sleep", TTL: time.Hour, OnExpiry: "reject"},
			config.ApprovalPolicy{Name: "risky", Type: "ingest", TTL: time.Minute, OnExpiry: "escalate"})
		b.submitTyped(t, "late", "sleep")
		b.submitTyped(t, "up", "ingest")
		res, err := b.eng.ExpireApprovals(ctx, nil, 100)
		require.NoError(t, err)
		require.Equal(t, engine.ExpireResult{}, res, "nothing has expired yet")

		b.clock.Add(time.Minute)
		// Past its TTL, before the expirer came by: no decision is taken on it any more.
		_, err = b.decide(t, "up", "approver:ann", true)
		require.ErrorIs(t, err, engine.ErrApprovalExpired)
		require.Equal(t, store.JobAwaitingApproval, b.job(t, "up").Status)
		fenced := func(context.Context, store.Tx) error { return store.ErrFenced }
		_, err = b.eng.ExpireApprovals(ctx, fenced, 100)
		require.ErrorIs(t, err, store.ErrFenced)
		res, err = b.eng.ExpireApprovals(ctx, nil, 100)
		require.NoError(t, err)
		require.Equal(t, engine.ExpireResult{Escalated: 1}, res)
		require.Contains(t, b.auditTypes(t, "up"), engine.EventApprovalEscalated)
		_, err = b.decide(t, "up", "approver:ann", true)
		require.ErrorIs(t, err, engine.ErrEscalated)
		out, err := b.decide(t, "up", "admin:x", true)
		require.NoError(t, err)
		require.Equal(t, store.JobPending, out.Job.Status)

		b.clock.Add(time.Hour)
		res, err = b.eng.ExpireApprovals(ctx, nil, 100)
		require.NoError(t, err)
		require.Equal(t, engine.ExpireResult{Expired: 1}, res)
		late := b.job(t, "late")
		require.Equal(t, store.JobCancelled, late.Status)
		require.Contains(t, late.LastError, "approval expired")
		require.Contains(t, b.auditTypes(t, "late"), engine.EventApprovalExpired)
		res, err = b.eng.ExpireApprovals(ctx, nil, 100)
		require.NoError(t, err)
		require.Equal(t, engine.ExpireResult{}, res, "once")
	})
}

// TestApprovalPolicyChecks: a policy that would hold every job, of an unknown type or with a
// TTL out of range is refused naming the field.
func TestApprovalPolicyChecks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		field string
		p     store.ApprovalPolicy
	}{
		{"name", store.ApprovalPolicy{Name: "a b", Type: "noop"}},
		{"type", store.ApprovalPolicy{Name: "all"}},
		{"type", store.ApprovalPolicy{Name: "x", Type: "nope"}},
		{"ttl_seconds", store.ApprovalPolicy{Name: "x", Type: "noop", TTL: time.Millisecond}},
		{"on_expiry", store.ApprovalPolicy{Name: "x", Type: "noop", OnExpiry: "shrug"}},
	} {
		_, err := b.eng.SetApprovalPolicy(context.Background(), tc.p, "admin:x")
		var ve *engine.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, tc.field, ve.Field)
	}
}
