package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testApprovals: policies round-trip, are replaced by name and deleted; requests and
// decisions round-trip; a request's status moves by compare-and-set (a decision sets
// decided_at, every move clears the expiry); one approver decides once per job; open
// requests list oldest first with their jobs' types; expired ones are found by their expiry;
// the rows of jobs that are gone are orphans.
func testApprovals(t *testing.T, b *bundle) {
	ctx := t.Context()
	pol := store.ApprovalPolicy{Name: b.prefix + "big", Type: "train", MinGPUs: 4, MinGPUMemoryMB: 80000, TwoKey: true,
		TTL: time.Hour, OnExpiry: store.ExpiryEscalate, UpdatedBy: "admin:x", UpdatedAt: b.now.Truncate(time.Microsecond)}
	require.NoError(t, b.s.ApprovalPolicyUpsert(ctx, pol))
	policies := func() []store.ApprovalPolicy {
		ps, err := b.s.ApprovalPolicyList(ctx)
		require.NoError(t, err)
		return slices.DeleteFunc(ps, func(p store.ApprovalPolicy) bool { return !strings.HasPrefix(p.Name, b.prefix) })
	}
	require.Equal(t, []store.ApprovalPolicy{pol}, policies())
	pol.Agent, pol.TwoKey, pol.OnExpiry = "alice", false, store.ExpiryReject
	require.NoError(t, b.s.ApprovalPolicyUpsert(ctx, pol))
	require.Equal(t, []store.ApprovalPolicy{pol}, policies())
	require.NoError(t, b.s.ApprovalPolicyDelete(ctx, pol.Name))
	require.Empty(t, policies())
	require.ErrorIs(t, b.s.ApprovalPolicyDelete(ctx, pol.Name), store.ErrNotFound)

	// 1994: no other subtest has requests expiring this early.
	base := time.Date(1994, 1, 1, 0, 0, 0, 0, time.UTC)
	held := b.insert(t, "held", func(p *store.JobInsertParams) { p.Status = store.JobAwaitingApproval; p.Type = "train" })
	other := b.insert(t, "other", func(p *store.JobInsertParams) { p.Status = store.JobAwaitingApproval })
	exp1, exp2 := base.Add(time.Minute), base.Add(time.Hour)
	reqs := []store.ApprovalRequest{
		{JobID: held.ID, Agent: b.agent(), Policy: "big", Required: 2, Status: store.ApprovalWaiting, OnExpiry: store.ExpiryReject,
			ExpiresAt: &exp1, CreatedAt: base},
		{JobID: other.ID, Agent: b.agent(), Policy: "big", Required: 1, Status: store.ApprovalWaiting, OnExpiry: store.ExpiryEscalate,
			ExpiresAt: &exp2, CreatedAt: base.Add(time.Second)},
	}
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error { return tx.ApprovalInsert(ctx, reqs) }))
	got, err := b.s.ApprovalGet(ctx, held.ID, false)
	require.NoError(t, err)
	require.Equal(t, reqs[0], got)
	_, err = b.s.ApprovalGet(ctx, b.id("nope"), false)
	require.ErrorIs(t, err, store.ErrNotFound)

	open, err := b.s.ApprovalListOpen(ctx, store.ApprovalListParams{Agent: b.agent()})
	require.NoError(t, err)
	require.Len(t, open, 2)
	require.Equal(t, held.ID, open[0].JobID, "oldest first")
	require.Equal(t, "train", open[0].Type)

	expired := func(at time.Time) []string {
		ids, err := b.s.ApprovalListExpired(ctx, at, 100)
		require.NoError(t, err)
		return slices.DeleteFunc(ids, func(id string) bool { return !strings.HasPrefix(id, b.prefix) })
	}
	require.Empty(t, expired(base))
	require.Equal(t, []string{held.ID}, expired(exp1))
	require.Equal(t, []string{held.ID, other.ID}, expired(exp2))

	d1 := store.ApprovalDecision{JobID: held.ID, Approver: "approver:ann", Decision: store.DecisionApprove, Reason: "ok", DecidedAt: base}
	require.NoError(t, b.s.ApprovalDecide(ctx, d1))
	require.ErrorIs(t, b.s.ApprovalDecide(ctx, d1), store.ErrConflict, "one approver decides once")
	d2 := store.ApprovalDecision{JobID: held.ID, Approver: "approver:bob", Decision: store.DecisionApprove, DecidedAt: base.Add(time.Second)}
	require.NoError(t, b.s.ApprovalDecide(ctx, d2))
	ds, err := b.s.ApprovalDecisions(ctx, []string{held.ID, other.ID})
	require.NoError(t, err)
	require.Equal(t, []store.ApprovalDecision{d1, d2}, ds)

	decided := base.Add(2 * time.Second)
	require.NoError(t, b.s.ApprovalSetStatus(ctx, held.ID, store.ApprovalWaiting, store.ApprovalApproved, decided))
	require.ErrorIs(t, b.s.ApprovalSetStatus(ctx, held.ID, store.ApprovalWaiting, store.ApprovalRejected, decided), store.ErrConflict)
	got, err = b.s.ApprovalGet(ctx, held.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.ApprovalApproved, got.Status)
	require.Nil(t, got.ExpiresAt)
	require.Equal(t, decided, *got.DecidedAt)
	require.NoError(t, b.s.ApprovalSetStatus(ctx, other.ID, store.ApprovalWaiting, store.ApprovalEscalated, decided))
	got, err = b.s.ApprovalGet(ctx, other.ID, false)
	require.NoError(t, err)
	require.Nil(t, got.ExpiresAt, "an escalated request no longer expires")
	require.Nil(t, got.DecidedAt, "nor is it decided")
	require.Empty(t, expired(exp2.Add(time.Hour)))
	open, err = b.s.ApprovalListOpen(ctx, store.ApprovalListParams{Agent: b.agent()})
	require.NoError(t, err)
	require.Equal(t, []string{other.ID}, []string{open[0].JobID})

	// A request whose job is gone is an orphan, with its decisions.
	gone := store.ApprovalRequest{JobID: b.id("gone"), Agent: b.agent(), Policy: "p", Required: 1, Status: store.ApprovalWaiting,
		OnExpiry: store.ExpiryReject, CreatedAt: base}
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error { return tx.ApprovalInsert(ctx, []store.ApprovalRequest{gone}) }))
	require.NoError(t, b.s.ApprovalDecide(ctx, store.ApprovalDecision{JobID: gone.JobID, Approver: "a", Decision: store.DecisionApprove, DecidedAt: base}))
	for {
		n, err := b.s.ApprovalDeleteOrphans(ctx, 1000)
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	_, err = b.s.ApprovalGet(ctx, gone.JobID, false)
	require.ErrorIs(t, err, store.ErrNotFound)
	ds, err = b.s.ApprovalDecisions(ctx, []string{gone.JobID})
	require.NoError(t, err)
	require.Empty(t, ds)
	_, err = b.s.ApprovalGet(ctx, held.ID, false)
	require.NoError(t, err, "the request of a job that exists stays")
}
