package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/wire"
)

// renewals returns a copy of the renew calls so far.
func (f *fakeAPI) renewCalls() []wire.RenewRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.RenewRequest(nil), f.renewals...)
}

func TestRenewer(t *testing.T) {
	t.Parallel()

	t.Run("RenewsHeldLeasesWithTelemetryAndTouchesEntries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		h := newBlockingHandler(4)
		b.reg.Register("block", h)
		sim, err := telemetry.NewSimulated("n1", "2x24576")
		require.NoError(t, err)
		b.api.mu.Lock()
		b.api.reserved = []wire.GPUReservation{{GPUIndex: 1, ReservedMB: 5000}}
		b.api.mu.Unlock()
		cfg := b.cfg(jobType("block", "block"))
		cfg.LeaseTTL, cfg.Telemetry = 300*time.Millisecond, sim
		b.start(t, cfg)
		require.Eventually(t, func() bool { return len(b.api.renewCalls()) > 0 }, 10*time.Second, 5*time.Millisecond,
			"telemetry is reported without any lease held")

		b.publish(t, "block", "block", `{}`, "j1")
		require.Equal(t, "j1", <-h.running)
		delivered := time.Now()
		// Several renewals of the job's lease, each with the node's telemetry.
		var withToken int
		require.Eventually(t, func() bool {
			withToken = 0
			for _, r := range b.api.renewCalls() {
				if len(r.Tokens) == 1 && r.Tokens[0] == "lease-j1" {
					withToken++
				}
			}
			return withToken >= 3
		}, 10*time.Second, 10*time.Millisecond)
		last := b.api.renewCalls()[len(b.api.renewCalls())-1]
		require.Equal(t, "w1", last.WorkerID)
		require.Equal(t, "n1", last.NodeID)
		require.NotNil(t, last.Telemetry)
		require.Equal(t, telemetry.SourceSimulated, last.Telemetry.Source)
		require.Len(t, last.Telemetry.GPUs, 2)
		require.EqualValues(t, 5000, last.Telemetry.GPUs[1].MemoryUsedMB, "the simulation follows the reservations")
		require.Zero(t, last.Telemetry.GPUs[0].MemoryUsedMB)

		// The entry is touched on every renewal (every 100ms): a second after its delivery, its
		// idle time is still well below a second.
		require.Eventually(t, func() bool {
			pend, err := b.streams.Redis().XPendingExt(context.Background(), &redis.XPendingExtArgs{
				Stream: b.streams.StreamKey("block"), Group: streams.GroupName("block"), Start: "-", End: "+", Count: 10,
			}).Result()
			return err == nil && len(pend) == 1 && time.Since(delivered) > time.Second && pend[0].Idle < 700*time.Millisecond
		}, 10*time.Second, 10*time.Millisecond)
		close(h.gate)
		require.Eventually(t, func() bool { _, ok := b.api.result("j1"); return ok }, 10*time.Second, 5*time.Millisecond)
	})

	t.Run("GoneLeaseStopsTheJobAndItsRefusedResultIsDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		h := newBlockingHandler(4)
		b.reg.Register("block", h)
		cfg := b.cfg(jobType("block", "block"))
		cfg.LeaseTTL = 150 * time.Millisecond
		w, _ := b.start(t, cfg)
		b.publish(t, "block", "block", `{}`, "zombie")
		require.Equal(t, "zombie", <-h.running)

		b.api.mu.Lock()
		b.api.gone["lease-zombie"], b.api.expired["lease-zombie"] = true, true
		b.api.mu.Unlock()
		// The renewal learns the lease is gone and cancels the handler; the API refuses its
		// result with a 409 lease_expired, and the worker drops it and acks the entry instead
		// of retrying forever.
		require.Eventually(t, func() bool { return b.api.outcome("zombie") == wire.OutcomeLeaseExpired },
			10*time.Second, 5*time.Millisecond)
		b.requirePending(t, "block", 0)
		require.Eventually(t, func() bool { return w.slots.inUse() <= 1 }, 5*time.Second, time.Millisecond)
		cur, _ := h.counts()
		require.Zero(t, cur, "the handler was stopped")
	})

	t.Run("LeaseExpiredOutcomeInABatchIsDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reg.Register("noop", NoopHandler{})
		b.api.mu.Lock()
		b.api.expired["lease-late"] = true
		b.api.mu.Unlock()
		cfg := b.cfg(jobType("noop", "noop"))
		cfg.FlushDelay = 50 * time.Millisecond // both results in one call
		b.start(t, cfg)
		b.publish(t, "noop", "noop", `{}`, "late", "fine")
		require.Eventually(t, func() bool {
			return b.api.outcome("late") == wire.OutcomeLeaseExpired && b.api.outcome("fine") == wire.OutcomeDone
		}, 10*time.Second, 5*time.Millisecond)
		b.requirePending(t, "noop", 0)
	})

	t.Run("FailedRenewalIsRetried", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		h := newBlockingHandler(4)
		b.reg.Register("block", h)
		b.api.mu.Lock()
		b.api.failNext["renew"] = 2
		b.api.mu.Unlock()
		cfg := b.cfg(jobType("block", "block"))
		cfg.LeaseTTL = 150 * time.Millisecond
		b.start(t, cfg)
		b.publish(t, "block", "block", `{}`, "j")
		require.Equal(t, "j", <-h.running)
		require.Eventually(t, func() bool { return len(b.api.renewCalls()) >= 2 }, 10*time.Second, 5*time.Millisecond)
		close(h.gate)
		require.Eventually(t, func() bool {
			r, ok := b.api.result("j")
			return ok && r.Status == wire.ResultDone
		}, 10*time.Second, 5*time.Millisecond)
	})
}

func TestFailureTextLeaseLost(t *testing.T) {
	t.Parallel()
	msg, nonRetryable := failureText(NonRetryable(errors.New("stopped")), errLeaseLost, time.Minute)
	require.True(t, strings.HasPrefix(msg, "lease lost: "), msg)
	require.False(t, nonRetryable, "a lost lease is never the job's fault")
}

func TestRenewIntervalFollowsTheShortestTTL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("noop", NoopHandler{})
	cfg := b.cfg(jobType("noop", "noop"))
	cfg.LeaseTTL, cfg.TouchInterval = 30*time.Second, -1
	w, err := New(cfg)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, w.renewInterval())
	w.held[&run{leaseTTL: 3 * time.Second}] = struct{}{}
	require.Equal(t, time.Second, w.renewInterval())
	w.cfg.Telemetry = telemetry.NewNone("n1")
	w.cfg.TelemetryInterval = 500 * time.Millisecond
	require.Equal(t, 500*time.Millisecond, w.renewInterval())
}

// TestDropGone: a renewal that finds leases gone stops the handlers still running, only marks
// a run whose handler returned (its result, on its way, usually released the lease itself),
// and leaves alone a run acknowledged since the renewal was sent. Only the first is a warning.
func TestDropGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("noop", NoopHandler{})
	w, err := New(b.cfg(jobType("noop", "noop")))
	require.NoError(t, err)
	var logs bytes.Buffer
	w.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	newRun := func(id string) (*run, context.Context) {
		ctx, cancel := context.WithCancelCause(context.Background())
		return &run{job: Job{ID: id, Attempt: 1, LeaseToken: "lease-" + id}, cancel: cancel}, ctx
	}
	running, runningCtx := newRun("running")
	finished, finishedCtx := newRun("finished")
	acked, _ := newRun("acked")
	w.running["running"] = running
	w.held[running], w.held[finished] = struct{}{}, struct{}{}

	w.dropGone([]*run{running, finished, acked}, []wire.GoneLease{
		{Token: "lease-running", Status: wire.LeaseExpired},
		{Token: "lease-finished", Status: wire.LeaseReleased},
		{Token: "lease-acked", Status: wire.LeaseReleased},
	})

	require.ErrorIs(t, context.Cause(runningCtx), errLeaseLost, "the running handler is stopped")
	require.NoError(t, finishedCtx.Err(), "a returned handler has nothing to stop")
	require.True(t, running.leaseGone.Load())
	require.True(t, finished.leaseGone.Load(), "the finished run's lease is not renewed again")
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "level=WARN"), out)
	require.Contains(t, out, `level=WARN msg="lease gone; stopping the job" job_id=running`)
	require.Contains(t, out, `level=DEBUG msg="lease gone after the job's handler returned" job_id=finished`)
	require.NotContains(t, out, "job_id=acked")
}

// pipeHook is a go-redis hook that holds or fails the worker's pipelines of one command (the
// touches' XCLAIM, the acks' XACK), as a Redis that hangs or refuses would, and lets every
// other command through.
type pipeHook struct {
	cmd     string
	calls   atomic.Int64
	entered chan struct{} // receives once per pipeline that reached the hook (buffered)
	// mode: hookPass lets them through, hookHold holds each until release closes (its
	// context ignored: a call that never returns), hookHang holds each until its context
	// ends (a stopped Redis, to the call's own deadline), hookFail fails it at once.
	mode    atomic.Int32
	release chan struct{}
}

const (
	hookPass = iota
	hookHold
	hookHang
	hookFail
)

func newPipeHook(cmd string, mode int32) *pipeHook {
	h := &pipeHook{cmd: cmd, entered: make(chan struct{}, 1000), release: make(chan struct{})}
	h.mode.Store(mode)
	return h
}

func (h *pipeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != h.cmd {
			return next(ctx, cmds)
		}
		h.calls.Add(1)
		select {
		case h.entered <- struct{}{}:
		default:
		}
		switch h.mode.Load() {
		case hookHold:
			<-h.release
		case hookHang:
			<-ctx.Done()
			return fmt.Errorf("held by the test: %w", ctx.Err())
		case hookFail:
			return errors.New("refused by the test")
		}
		return next(ctx, cmds)
	}
}

// TestRenewalsDoNotWaitForTouches: the touch of the entries runs apart from the renewals. A
// touch that never returns (Redis stopped) holds no renewal back, and the job it belongs to
// keeps its lease and completes once the touch is let go.
func TestRenewalsDoNotWaitForTouches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hook := newPipeHook("xclaim", hookHold)
	b.streams.Redis().AddHook(hook)
	h := newBlockingHandler(4)
	b.reg.Register("block", h)
	cfg := b.cfg(jobType("block", "block"))
	cfg.LeaseTTL = 300 * time.Millisecond // a renewal every 100 ms
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hook.release) }) }
	b.start(t, cfg)
	t.Cleanup(release) // before the worker's stop (cleanups run last first)
	b.publish(t, "block", "block", `{}`, "j1")
	require.Equal(t, "j1", <-h.running)

	select {
	case <-hook.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no touch reached Redis within 30s of the job's start")
	}
	// The touch is stuck; the renewals of the job's lease go on regardless.
	renewalsOf := func(token string) int {
		n := 0
		for _, r := range b.api.renewCalls() {
			if len(r.Tokens) == 1 && r.Tokens[0] == token {
				n++
			}
		}
		return n
	}
	before := renewalsOf("lease-j1")
	require.Eventually(t, func() bool { return renewalsOf("lease-j1") >= before+5 }, 30*time.Second, 5*time.Millisecond,
		"renewals stopped behind a touch that does not return: %d since it began", renewalsOf("lease-j1")-before)
	require.EqualValues(t, 1, hook.calls.Load(), "at most one touch in flight: the kicks meanwhile are folded")

	release()
	close(h.gate)
	require.Eventually(t, func() bool {
		r, ok := b.api.result("j1")
		return ok && r.Status == wire.ResultDone
	}, 30*time.Second, 5*time.Millisecond)
	b.requirePending(t, "block", 0)
}

// TestTouchFailuresWarnOncePerOutage: a touch that hangs ends at its own deadline and the next
// ones are tried; the outage is one warning, however many touches fail, and its end is logged.
func TestTouchFailuresWarnOncePerOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hook := newPipeHook("xclaim", hookHang)
	b.streams.Redis().AddHook(hook)
	h := newBlockingHandler(4)
	b.reg.Register("block", h)
	var logs testenv.SyncBuffer
	cfg := b.cfg(jobType("block", "block"))
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.LeaseTTL, cfg.TouchInterval = 300*time.Millisecond, 100*time.Millisecond
	b.start(t, cfg)
	b.publish(t, "block", "block", `{}`, "j1")
	require.Equal(t, "j1", <-h.running)

	// Hung touches end at their deadline (touchTimeoutMin here), so more of them come.
	require.Eventually(t, func() bool { return hook.calls.Load() >= 3 }, 30*time.Second, 5*time.Millisecond)
	hook.mode.Store(hookFail)
	n := hook.calls.Load()
	require.Eventually(t, func() bool { return hook.calls.Load() >= n+3 }, 30*time.Second, 5*time.Millisecond)
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "touch in-flight entries failed"), out)
	require.Contains(t, out, "context deadline exceeded", "the first failure was the hung touch's deadline")
	require.NotContains(t, out, "recovered")

	hook.mode.Store(hookPass)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "touch in-flight entries recovered") },
		30*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), logs.String())
	close(h.gate)
	require.Eventually(t, func() bool { _, ok := b.api.result("j1"); return ok }, 30*time.Second, 5*time.Millisecond)
}

// quickThenBlock runs the job "quick" at once and blocks every other (blockingHandler).
type quickThenBlock struct{ *blockingHandler }

func (h quickThenBlock) Run(ctx context.Context, job Job) (json.RawMessage, error) {
	if job.ID == "quick" {
		return json.RawMessage(`{}`), nil
	}
	return h.blockingHandler.Run(ctx, job)
}

// TestClaimedJobsDoNotWaitForAcks: when results ride along with a claim, the jobs claimed
// start, and their leases are renewed, before the results' entries are acked; an ack that
// hangs (Redis stopped) holds no new lease back. One slot: "quick" runs, and its result goes
// out with the claim of "slow" (claimAlong); then quick's ack hangs.
func TestClaimedJobsDoNotWaitForAcks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hook := newPipeHook("xack", hookHold)
	b.streams.Redis().AddHook(hook)
	h := newBlockingHandler(4)
	b.reg.Register("block", quickThenBlock{h})
	cfg := b.cfg(jobType("block", "block"))
	cfg.Concurrency, cfg.Batch, cfg.LeaseTTL = 1, 1, 300*time.Millisecond
	b.publish(t, "block", "block", `{}`, "quick", "slow")
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hook.release) }) }
	b.start(t, cfg)
	t.Cleanup(release) // before the worker's stop

	select {
	case <-hook.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("quick's entry was never acked")
	}
	select {
	case id := <-h.running:
		require.Equal(t, "slow", id)
	case <-time.After(30 * time.Second):
		t.Fatal("the job claimed with quick's result waits for quick's ack")
	}
	b.api.mu.Lock()
	withClaims := b.api.resultsWithClaims
	b.api.mu.Unlock()
	require.Equal(t, 1, withClaims, "quick's result rode along with slow's claim")
	renewals := func() int {
		n := 0
		for _, r := range b.api.renewCalls() {
			if slices.Contains(r.Tokens, "lease-slow") {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return renewals() >= 3 }, 30*time.Second, 5*time.Millisecond,
		"slow's lease is renewed while quick's ack hangs")

	release()
	close(h.gate)
	require.Eventually(t, func() bool {
		r, ok := b.api.result("slow")
		return ok && r.Status == wire.ResultDone
	}, 30*time.Second, 5*time.Millisecond)
	b.requirePending(t, "block", 0)
}
