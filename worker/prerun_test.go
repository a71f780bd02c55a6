package worker

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/wire"
)

// fakePreRunner answers pre-run checks by job id and records them.
type fakePreRunner struct {
	mu      sync.Mutex
	answers map[string]wire.PreRunResponse
	err     error
	asked   []wire.PreRunRequest
}

func (f *fakePreRunner) PreRun(_ context.Context, req wire.PreRunRequest) (wire.PreRunResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, req)
	if f.err != nil {
		return wire.PreRunResponse{}, f.err
	}
	return f.answers[req.JobID], nil
}

// TestWorkerPreRun: a job of a type with a pre-run hook asks before it runs; a refusal fails
// it for good with the hook's message and a retry or an unreachable API fails it to be
// retried, in both cases without running the handler; a job of another type runs unasked.
func TestWorkerPreRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran atomic.Int64
	b.reg.Register("count", HandlerFunc(func(context.Context, Job) (json.RawMessage, error) {
		ran.Add(1)
		return json.RawMessage(`{}`), nil
	}))
	pr := &fakePreRunner{answers: map[string]wire.PreRunResponse{
		"ok":     {Decision: wire.PreRunRun, StatusCode: 200},
		"denied": {Decision: wire.PreRunFail, Message: "agent a is over its budget", StatusCode: 403},
		"later":  {Decision: wire.PreRunRetry, Message: "pre-run hook: HTTP 503: busy", StatusCode: 503},
	}}
	b.publish(t, "gated", "gated", `{}`, "ok", "denied", "later")
	b.publish(t, "free", "free", `{}`, "free-1")
	cfg := b.cfg(jobType("gated", "count"), jobType("free", "count"))
	cfg.PreRun, cfg.PreRunTypes = pr, []string{"gated"}
	b.start(t, cfg)
	require.Eventually(t, func() bool { return b.api.resultCount() == 4 }, 10*time.Second, 5*time.Millisecond)

	require.Equal(t, int64(2), ran.Load(), "the handler ran for ok and free-1 only")
	r, _ := b.api.result("denied")
	require.Equal(t, wire.ResultFailed, r.Status)
	require.Equal(t, "agent a is over its budget", r.Error, "the hook's message is the job's error")
	require.True(t, r.NonRetryable)
	r, _ = b.api.result("later")
	require.Equal(t, wire.ResultFailed, r.Status)
	require.Equal(t, "pre-run hook: HTTP 503: busy", r.Error)
	require.False(t, r.NonRetryable)
	r, _ = b.api.result("ok")
	require.Equal(t, wire.ResultDone, r.Status)

	pr.mu.Lock()
	defer pr.mu.Unlock()
	require.Len(t, pr.asked, 3, "only the gated type asks")
	for _, q := range pr.asked {
		require.Equal(t, "lease-"+q.JobID, q.LeaseToken)
		require.Equal(t, 1, q.Attempt)
		require.Equal(t, "w1", q.WorkerID)
	}
}

// TestWorkerPreRunUnreachable: a check that fails (the API down) fails the attempt so that it
// is retried; the types the orchestrator's registration answer names ask too.
func TestWorkerPreRunUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("count", NoopHandler{})
	pr := &fakePreRunner{err: &client.APIError{StatusCode: 503, Code: "unavailable", Message: "down"}}
	b.publish(t, "gated", "gated", `{}`, "j1")
	cfg := b.cfg(jobType("gated", "count"))
	cfg.PreRun = pr
	w, err := New(cfg)
	require.NoError(t, err)
	w.preRunTypes.set([]string{"gated"}) // as a registration answer sets it
	require.True(t, w.hooked("gated"))
	require.False(t, w.hooked("other"))
	out, err := w.runJob(t.Context(), Job{ID: "j1", Type: "gated", Attempt: 1})
	require.Nil(t, out)
	require.ErrorContains(t, err, "pre-run check")
	require.False(t, IsNonRetryable(err))
}
