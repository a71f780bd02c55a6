package worker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

func TestWorkerRunsJobsEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("noop", NoopHandler{})
	b.reg.Register("sleep", SleepHandler{})
	// The sleeps outlive the flush delay (5 ms) by far more than a busy machine's scheduling
	// delays; one round of them fills the worker's slots (8).
	noops, sleeps := jobIDs("noop", 300), jobIDs("sleep", 8)
	b.publish(t, "noop", "noop", `{}`, noops...)
	w, stop := b.start(t, b.cfg(jobType("noop", "noop"), jobType("sleep", "sleep")))
	b.publish(t, "sleep", "sleep", `{"ms": 500}`, sleeps...)

	require.Eventually(t, func() bool { return b.api.resultCount() == len(noops)+len(sleeps) },
		20*time.Second, 5*time.Millisecond)
	b.requirePending(t, "noop", 0)
	b.requirePending(t, "sleep", 0)
	stop()
	require.Zero(t, w.slots.inUse(), "slots leaked")

	b.api.mu.Lock()
	defer b.api.mu.Unlock()
	require.Zero(t, b.api.startAfterResult, "a start report reached the API after its job's result")
	for _, id := range append(noops, sleeps...) {
		r := b.api.results[id]
		require.Equal(t, wire.ResultDone, r.Status, id)
		require.Equal(t, 1, r.Attempt)
		require.Equal(t, "lease-"+id, r.LeaseToken)
	}
	// A job that outlives the flush delay has its start reported on its own; a no-op's
	// result may carry its start instead.
	for _, id := range sleeps {
		require.True(t, b.api.started[id], "the start of %s was not reported", id)
	}
	require.Equal(t, len(noops)+len(sleeps), len(b.api.started)+b.api.unstartedResults)
	require.JSONEq(t, `{}`, string(b.api.results[noops[0]].Result))
	require.JSONEq(t, `{"slept_ms":500}`, string(b.api.results[sleeps[0]].Result))
}

func TestWorkerRefusedEntries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("noop", NoopHandler{})
	b.publish(t, "noop", "", "", "unknown")                          // not_found
	b.publish(t, "noop", "noop", `{}`, "taken", "later", "ok", "ok") // "ok" twice: a duplicate entry
	b.api.mu.Lock()
	b.api.jobs["taken"].status = "running" // not_pending
	b.api.refuse["later"] = wire.ReasonRetryLater
	b.api.mu.Unlock()
	// An entry that is not ours at all (no job_id).
	require.NoError(t, b.streams.Redis().XAdd(context.Background(), &redis.XAddArgs{
		Stream: b.streams.StreamKey("noop"), Values: []any{"foo", "bar"},
	}).Err())

	w, _ := b.start(t, b.cfg(jobType("noop", "noop")))
	require.Eventually(t, func() bool { _, ok := b.api.result("ok"); return ok }, 10*time.Second, 5*time.Millisecond)
	// Everything is acked except the retry_later entry.
	b.requirePending(t, "noop", 1)
	require.Eventually(t, func() bool { return w.slots.inUse() <= 1 }, 5*time.Second, time.Millisecond,
		"only a reader waiting on its next read may hold a slot")
	pend, err := b.streams.Redis().XPendingExt(context.Background(), &redis.XPendingExtArgs{
		Stream: b.streams.StreamKey("noop"), Group: streams.GroupName("noop"), Start: "-", End: "+", Count: 10,
	}).Result()
	require.NoError(t, err)
	require.Len(t, pend, 1)
	msgs, err := b.streams.Redis().XRange(context.Background(), b.streams.StreamKey("noop"), pend[0].ID, pend[0].ID).Result()
	require.NoError(t, err)
	require.Equal(t, "later", msgs[0].Values["job_id"])

	b.api.mu.Lock()
	defer b.api.mu.Unlock()
	require.Len(t, b.api.results, 1)
	require.Equal(t, 1, b.api.claims["unknown"])
	require.Equal(t, 1, b.api.claims["taken"])
}

// TestWorkerRetriesDeferredEntries: a job refused with retry_later (its GPU memory is held by
// the worker's own running job) is claimed again once that job's result is reported, by the
// worker itself: nothing else runs here (no reclaimer), so without the retry it would wait.
func TestWorkerRetriesDeferredEntries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("sleep", SleepHandler{})
	b.publish(t, "sleep", "sleep", `{"ms": 200}`, "holder", "waiter")
	b.api.mu.Lock()
	b.api.roomAfter["waiter"] = "holder"
	b.api.mu.Unlock()
	w, _ := b.start(t, b.cfg(jobType("sleep", "sleep")))

	require.Eventually(t, func() bool { _, ok := b.api.result("waiter"); return ok }, 20*time.Second, 5*time.Millisecond,
		"the deferred job never ran")
	b.requirePending(t, "sleep", 0)
	require.False(t, w.deferred.any(), "claimed: no longer deferred")
	b.api.mu.Lock()
	defer b.api.mu.Unlock()
	require.GreaterOrEqual(t, b.api.claims["waiter"], 2, "refused first, claimed on a retry")
	require.Equal(t, wire.ResultDone, b.api.results["waiter"].Status)
}

func TestWorkerConcurrencyNeverExceeded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlockingHandler(100)
	b.reg.Register("block", h)
	cfg := b.cfg(jobType("alpha", "block"), jobType("beta", "block"))
	cfg.Concurrency, cfg.Batch = 4, 10
	alpha, beta := jobIDs("a", 15), jobIDs("b", 15)
	b.publish(t, "alpha", "alpha", `{}`, alpha...)
	b.publish(t, "beta", "beta", `{}`, beta...)
	w, _ := b.start(t, cfg)

	require.Eventually(t, func() bool { cur, _ := h.counts(); return cur == 4 }, 10*time.Second, 2*time.Millisecond)
	require.LessOrEqual(t, w.slots.inUse(), 4)
	close(h.gate)
	require.Eventually(t, func() bool { return b.api.resultCount() == 30 }, 20*time.Second, 5*time.Millisecond)
	_, peak := h.counts()
	require.Equal(t, 4, peak, "peak concurrency")
	b.requirePending(t, "alpha", 0)
	b.requirePending(t, "beta", 0)
}

func TestWorkerCancelListCancelsRunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlockingHandler(10)
	b.reg.Register("block", h)
	b.reg.Register("noop", NoopHandler{})
	b.publish(t, "block", "block", `{}`, "victim")
	b.start(t, b.cfg(jobType("block", "block"), jobType("noop", "noop")))
	require.Equal(t, "victim", <-h.running)

	b.api.mu.Lock()
	b.api.cancelled["victim"] = true
	b.api.mu.Unlock()
	// The next claim carries the in-flight ids and brings the cancel list back.
	b.publish(t, "noop", "noop", `{}`, "trigger")

	require.Eventually(t, func() bool { _, ok := b.api.result("victim"); return ok }, 10*time.Second, 5*time.Millisecond)
	r, _ := b.api.result("victim")
	require.Equal(t, wire.ResultFailed, r.Status)
	require.Contains(t, r.Error, "cancelled by the orchestrator")
	b.requirePending(t, "block", 0) // a stale result is acked too
	b.requirePending(t, "noop", 0)
}

func TestWorkerGracefulShutdown(t *testing.T) {
	t.Parallel()

	t.Run("FinishesInFlightJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		h := newBlockingHandler(10)
		b.reg.Register("block", h)
		ids := jobIDs("g", 3)
		b.publish(t, "block", "block", `{}`, ids...)
		w, err := New(b.cfg(jobType("block", "block")))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		for range ids {
			<-h.running
		}
		cancel()
		select {
		case err := <-done:
			t.Fatalf("Run returned (%v) while jobs were still running", err)
		default:
		}
		close(h.gate)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after the jobs finished")
		}
		for _, id := range ids {
			r, ok := b.api.result(id)
			require.True(t, ok, id)
			require.Equal(t, wire.ResultDone, r.Status)
		}
		b.requirePending(t, "block", 0)
	})

	t.Run("CancelsJobsAfterGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		h := newBlockingHandler(10)
		b.reg.Register("block", h)
		b.publish(t, "block", "block", `{}`, "slow")
		cfg := b.cfg(jobType("block", "block"))
		cfg.ShutdownGrace = 50 * time.Millisecond
		_, stop := b.start(t, cfg)
		<-h.running
		stop()
		r, ok := b.api.result("slow")
		require.True(t, ok)
		require.Equal(t, wire.ResultFailed, r.Status)
		require.Equal(t, "worker shutdown", r.Error)
		require.False(t, r.NonRetryable)
		b.requirePending(t, "block", 0)
	})
}

func TestWorkerRetriesAPIFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("noop", NoopHandler{})
	b.api.failNext["claim"], b.api.failNext["start"], b.api.failNext["complete"] = 2, 2, 3
	ids := jobIDs("r", 10)
	b.publish(t, "noop", "noop", `{}`, ids...)
	b.start(t, b.cfg(jobType("noop", "noop")))
	require.Eventually(t, func() bool { return b.api.resultCount() == len(ids) }, 10*time.Second, 5*time.Millisecond)
	b.requirePending(t, "noop", 0)
	b.api.mu.Lock()
	defer b.api.mu.Unlock()
	require.Zero(t, b.api.startAfterResult)
}

func TestWorkerSplitsRefusedResultBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("noop", NoopHandler{})
	b.api.failNext["complete"] = 2
	b.api.failErr["complete"] = &client.APIError{StatusCode: 413, Code: "too_large"}
	ids := jobIDs("s", 20)
	b.publish(t, "noop", "noop", `{}`, ids...)
	cfg := b.cfg(jobType("noop", "noop"))
	cfg.FlushDelay = 50 * time.Millisecond // let results gather into one batch
	b.start(t, cfg)
	require.Eventually(t, func() bool { return b.api.resultCount() == len(ids) }, 10*time.Second, 5*time.Millisecond)
	b.requirePending(t, "noop", 0)
}

func TestWorkerLeavesRefusedClaimBatchToReclaimer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("noop", NoopHandler{})
	b.api.failNext["claim"] = 1
	b.api.failErr["claim"] = &client.APIError{StatusCode: 400, Code: "bad_request", Field: "jobs[0].job_id"}
	b.publish(t, "noop", "noop", `{}`, "poison")
	b.start(t, b.cfg(jobType("noop", "noop")))
	b.requirePending(t, "noop", 1)
	b.publish(t, "noop", "noop", `{}`, "good")
	require.Eventually(t, func() bool { _, ok := b.api.result("good"); return ok }, 10*time.Second, 5*time.Millisecond)
	b.requirePending(t, "noop", 1) // the poison entry waits for the reclaimer; the reader goes on
	_, ok := b.api.result("poison")
	require.False(t, ok)
}

func TestWorkerFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlockingHandler(10)
	b.reg.Register("block", h)
	b.reg.Register("panic", HandlerFunc(func(context.Context, Job) (json.RawMessage, error) { panic("boom") }))
	b.reg.Register("text", HandlerFunc(func(context.Context, Job) (json.RawMessage, error) {
		return json.RawMessage("not json"), nil
	}))
	b.api.add("late", "block", `{}`)
	b.api.jobs["late"].timeout = 30 * time.Millisecond
	b.publish(t, "block", "", "", "late")
	b.publish(t, "panic", "panic", `{}`, "boom")
	b.publish(t, "text", "text", `{}`, "txt")
	b.start(t, b.cfg(jobType("block", "block"), jobType("panic", "panic"), jobType("text", "text")))
	require.Eventually(t, func() bool { return b.api.resultCount() == 3 }, 10*time.Second, 5*time.Millisecond)

	r, _ := b.api.result("late")
	require.Equal(t, wire.ResultFailed, r.Status)
	require.Contains(t, r.Error, "timed out after 30ms")
	require.False(t, r.NonRetryable)
	r, _ = b.api.result("boom")
	require.Equal(t, wire.ResultFailed, r.Status)
	require.Contains(t, r.Error, "handler panicked: boom")
	r, _ = b.api.result("txt")
	require.Equal(t, wire.ResultDone, r.Status)
	require.Equal(t, `"not json"`, string(r.Result))
	for _, s := range []string{"block", "panic", "text"} {
		b.requirePending(t, s, 0)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Register("noop", NoopHandler{})
	cfg := b.cfg(jobType("noop", "noop"), jobType("gpu", "missing"))
	cfg.WorkerID = ""
	_, err := New(cfg)
	require.ErrorContains(t, err, "worker id is required")
	require.ErrorContains(t, err, `handler "missing" is not registered`)
}

// TestWorkerReportsAndRefillsInOneCall: a worker whose slots are all busy sends its results
// with the claim of the entries that wait (claimAlong, or a reader's claim taking queued
// results along), never runs more than its concurrency, and runs every job once.
func TestWorkerReportsAndRefillsInOneCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlockingHandler(400)
	close(h.gate) // every job ends at once: the results pile up faster than calls go out
	b.reg.Register("block", h)
	cfg := b.cfg(jobType("noop", "block"))
	cfg.Concurrency, cfg.Batch = 4, 10
	ids := jobIDs("r", 300)
	b.publish(t, "noop", "noop", `{}`, ids...)
	w, _ := b.start(t, cfg)

	require.Eventually(t, func() bool { return b.api.resultCount() == len(ids) }, 20*time.Second, 5*time.Millisecond)
	_, peak := h.counts()
	require.LessOrEqual(t, peak, 4, "peak concurrency")
	b.requirePending(t, "noop", 0)
	require.Eventually(t, func() bool { return w.slots.inUse() <= 1 }, 5*time.Second, time.Millisecond,
		"every slot comes back but the one a waiting reader holds")
	b.api.mu.Lock()
	defer b.api.mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, b.api.claims[id], "job %s claimed once", id)
		require.Equal(t, wire.OutcomeDone, b.api.outcomes[id], "job %s", id)
	}
	require.Positive(t, b.api.resultsWithClaims, "results rode along with claims")
}

// TestWorkerClaimRefusedWithResults: when a claim that carries results is refused as a whole,
// the results are reported on their own and the claim is made alone; nothing is lost.
func TestWorkerClaimRefusedWithResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlockingHandler(400)
	close(h.gate)
	b.reg.Register("block", h)
	b.api.mu.Lock()
	b.api.refuseWithResults = 1000 // every one
	b.api.mu.Unlock()
	ids := jobIDs("f", 100)
	b.publish(t, "noop", "noop", `{}`, ids...)
	cfg := b.cfg(jobType("noop", "block"))
	cfg.Concurrency, cfg.Batch = 4, 10
	w, _ := b.start(t, cfg)

	// Refused claims leave their entries to the reclaimer; every job that was claimed ends
	// with its result recorded, and no slot stays taken.
	require.Eventually(t, func() bool {
		b.api.mu.Lock()
		defer b.api.mu.Unlock()
		claimed := 0
		for _, j := range b.api.jobs {
			if j.status != "pending" {
				claimed++
			}
		}
		return claimed > 0 && claimed == len(b.api.results) && b.api.refusedWithResults > 0
	}, 20*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return w.slots.inUse() <= 1 }, 5*time.Second, time.Millisecond)
	b.api.mu.Lock()
	defer b.api.mu.Unlock()
	require.Zero(t, b.api.resultsWithClaims)
	for id, n := range b.api.claims {
		require.LessOrEqual(t, n, 1, "job %s claimed once at most", id)
	}
}
