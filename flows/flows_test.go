package flows

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// fakeEngine counts the passes the loops ask for and answers with canned results.
type fakeEngine struct {
	resolves, expires, refreshes atomic.Int64
	batch                        atomic.Int64
	passed                       chan struct{}
	err                          error
}

func newFake() *fakeEngine { return &fakeEngine{passed: make(chan struct{}, 16)} }

func (f *fakeEngine) ResolveFlows(_ context.Context, fence engine.Fence, batch int) (engine.ResolveResult, error) {
	f.resolves.Add(1)
	f.batch.Store(int64(batch))
	f.passed <- struct{}{}
	if fence != nil {
		return engine.ResolveResult{}, fence(context.Background(), nil)
	}
	return engine.ResolveResult{Released: 1}, f.err
}

func (f *fakeEngine) ExpireApprovals(context.Context, engine.Fence, int) (engine.ExpireResult, error) {
	f.expires.Add(1)
	return engine.ExpireResult{Expired: 2}, f.err
}

func (f *fakeEngine) RefreshApprovalPolicies(context.Context) error {
	f.refreshes.Add(1)
	return f.err
}

// TestResolver: RunOnce is one engine pass with the batch and fence; a wake runs a pass at
// once (the interval is an hour); Stop is idempotent and safe before Start.
func TestResolver(t *testing.T) {
	t.Parallel()
	f := newFake()
	wakes := make(chan struct{}, 1)
	r := NewResolver(f, ResolverConfig{Interval: time.Hour, Batch: 7, Wakes: wakes})
	r.Stop()
	res, err := r.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, engine.ResolveResult{Released: 1}, res)
	require.EqualValues(t, 7, f.batch.Load())
	<-f.passed

	require.NoError(t, r.Start(t.Context()))
	<-f.passed // the first pass runs at once (no stagger)
	wakes <- struct{}{}
	select {
	case <-f.passed:
	case <-time.After(30 * time.Second):
		t.Fatal("a wake did not run a pass")
	}
	r.Stop()
	r.Stop()

	fenced := NewResolver(f, ResolverConfig{Fence: func(context.Context, store.Tx) error { return store.ErrFenced }})
	_, err = fenced.RunOnce(t.Context())
	require.ErrorIs(t, err, store.ErrFenced)
}

// TestApprovalExpirerAndRefresher: the expirer's RunOnce is one engine pass; the refresher
// reads the policies once before Start returns, and keeps going when a read fails.
func TestApprovalExpirerAndRefresher(t *testing.T) {
	t.Parallel()
	f := newFake()
	x := NewApprovalExpirer(f, ApprovalExpirerConfig{})
	res, err := x.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, engine.ExpireResult{Expired: 2}, res)

	p := NewPolicyRefresher(f, PolicyRefresherConfig{Interval: time.Hour})
	require.NoError(t, p.Start(t.Context()))
	require.EqualValues(t, 1, f.refreshes.Load(), "read before Start returns")
	p.Stop()

	failing := newFake()
	failing.err = errors.New("database down")
	q := NewPolicyRefresher(failing, PolicyRefresherConfig{Interval: time.Hour})
	require.NoError(t, q.Start(t.Context()), "a failed first read is logged, not fatal")
	q.Stop()
}
