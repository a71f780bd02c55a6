package engine_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// flowCalls counts the store calls that only jobs of flows should cause.
type flowCalls struct{ n atomic.Int64 }

// flowCountingStore is a store.Store whose flow and approval operations are counted, in and out
// of transactions.
type flowCountingStore struct {
	store.Store
	c *flowCalls
}

type flowCountingTx struct {
	store.Tx
	c *flowCalls
}

func (s flowCountingStore) WithTx(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.WithTx(ctx, func(tx store.Tx) error { return fn(flowCountingTx{tx, s.c}) })
}

func (s flowCountingStore) JobParents(ctx context.Context, ids []string, limit int) ([]store.JobParent, error) {
	s.c.n.Add(1)
	return s.Store.JobParents(ctx, ids, limit)
}

func (s flowCountingStore) ApprovalPolicyList(ctx context.Context) ([]store.ApprovalPolicy, error) {
	s.c.n.Add(1)
	return s.Store.ApprovalPolicyList(ctx)
}

func (t flowCountingTx) JobParents(ctx context.Context, ids []string, limit int) ([]store.JobParent, error) {
	t.c.n.Add(1)
	return t.Tx.JobParents(ctx, ids, limit)
}

func (t flowCountingTx) JobDepInsert(ctx context.Context, deps []store.JobDep) error {
	t.c.n.Add(1)
	return t.Tx.JobDepInsert(ctx, deps)
}

func (t flowCountingTx) JobAddFlow(ctx context.Context, ids []string, f store.JobFlow) error {
	t.c.n.Add(1)
	return t.Tx.JobAddFlow(ctx, ids, f)
}

func (t flowCountingTx) ApprovalGet(ctx context.Context, id string, forUpdate bool) (store.ApprovalRequest, error) {
	t.c.n.Add(1)
	return t.Tx.ApprovalGet(ctx, id, forUpdate)
}

func (t flowCountingTx) ApprovalInsert(ctx context.Context, rs []store.ApprovalRequest) error {
	t.c.n.Add(1)
	return t.Tx.ApprovalInsert(ctx, rs)
}

func (t flowCountingTx) ApprovalPolicyList(ctx context.Context) ([]store.ApprovalPolicy, error) {
	t.c.n.Add(1)
	return t.Tx.ApprovalPolicyList(ctx)
}

// TestPlainJobPaysNoFlowStatement: with an approval policy in force (for another type) and the
// resolver's wake wired, a plain job's submit, claim, completion and cancel make no call of
// the flows' or approvals' store operations; a job with depends_on does.
func TestPlainJobPaysNoFlowStatement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	calls := &flowCalls{}
	st := flowCountingStore{Store: b.store, c: calls}
	lm := engine.NewLeaseManager(st, b.cfg, leases.Options{Now: b.clock.Now})
	eng := engine.New(st, b.streams, b.cfg, engine.Options{Now: b.clock.Now, Leases: lm, WakeFlows: func() {}})
	t.Cleanup(func() { eng.FlushMarks(context.Background()) })
	_, err := eng.SetApprovalPolicy(ctx, store.ApprovalPolicy{Name: "sleepy", Type: "sleep", TTL: time.Hour}, "admin:x")
	require.NoError(t, err)
	calls.n.Store(0)

	submit := func(id string, deps ...string) {
		_, _, err := eng.Submit(ctx, engine.SubmitParams{JobID: id, Type: "noop", Agent: "tester", Payload: json.RawMessage(`{}`),
			DependsOn: deps})
		require.NoError(t, err)
	}
	submit("plain")
	submit("cancelled")
	c, err := eng.Claim(ctx, engine.ClaimParams{WorkerID: "w", Items: []engine.ClaimItem{{JobID: "plain", Stream: "noop"}}})
	require.NoError(t, err)
	require.Len(t, c.Claimed, 1)
	_, err = eng.Complete(ctx, engine.CompleteParams{WorkerID: "w", Results: []engine.Result{{JobID: "plain", Attempt: 1,
		LeaseToken: c.Leases["plain"].Token, Done: true}}})
	require.NoError(t, err)
	_, err = eng.Cancel(ctx, "cancelled", "agent:tester")
	require.NoError(t, err)
	require.Zero(t, calls.n.Load(), "a plain job's life calls none of the flows' operations")

	submit("child", "plain")
	require.Positive(t, calls.n.Load(), "a job with depends_on does")
}
