package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// fakeJob is a job row of the fake API.
type fakeJob struct {
	typ     string
	payload json.RawMessage
	timeout time.Duration
	status  string
	attempt int
}

// fakeAPI implements API in memory: the first claim of a pending job wins; starts and results
// are recorded.
type fakeAPI struct {
	mu     sync.Mutex
	jobs   map[string]*fakeJob
	refuse map[string]string // job id -> forced refusal reason
	// roomAfter: job id -> the job whose result frees its room; until that result is
	// recorded, its claims are refused with retry_later (as a GPU job that does not fit yet).
	roomAfter map[string]string
	cancelled map[string]bool
	started   map[string]bool
	results   map[string]wire.JobResult
	outcomes  map[string]string
	// claims counts claim calls per job id.
	claims map[string]int
	// failNext counts calls to fail, per method ("claim", "start", "complete"), with
	// failErr[method] or else a 503.
	failNext map[string]int
	failErr  map[string]error
	// startAfterResult counts start reports that arrived after their job's result (a short
	// job's result may carry its start instead, but a start must never trail its result).
	startAfterResult int
	// unstartedResults counts results whose job's start was never reported: the result
	// carried it.
	unstartedResults int
	// renewals are the renew calls received; gone are the lease tokens renewals report gone;
	// reserved is what renewals answer as reserved per GPU.
	renewals []wire.RenewRequest
	gone     map[string]bool
	reserved []wire.GPUReservation
	// expired are lease tokens whose results are refused with lease_expired (as an outcome;
	// a call whose every result is expired gets the API's 409).
	expired map[string]bool
	// resultsWithClaims counts the results that came with a claim rather than a completion.
	resultsWithClaims int
	// refuseWithResults counts claims carrying results to refuse with a 400;
	// refusedWithResults counts those refused.
	refuseWithResults, refusedWithResults int
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{
		jobs: map[string]*fakeJob{}, refuse: map[string]string{}, roomAfter: map[string]string{}, cancelled: map[string]bool{},
		started: map[string]bool{}, results: map[string]wire.JobResult{}, outcomes: map[string]string{},
		claims: map[string]int{}, failNext: map[string]int{}, failErr: map[string]error{},
		gone: map[string]bool{}, expired: map[string]bool{},
	}
}

func (f *fakeAPI) add(id, typ string, payload string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs[id] = &fakeJob{typ: typ, payload: json.RawMessage(payload), status: "pending"}
}

func (f *fakeAPI) fail(method string) error {
	if f.failNext[method] > 0 {
		f.failNext[method]--
		if err := f.failErr[method]; err != nil {
			return err
		}
		return &client.APIError{StatusCode: 503, Code: "unavailable", Message: "injected failure"}
	}
	return nil
}

func (f *fakeAPI) cancelList(ids []string) []string {
	var out []string
	for _, id := range ids {
		if f.cancelled[id] {
			out = append(out, id)
		}
	}
	return out
}

func (f *fakeAPI) Claim(_ context.Context, req wire.ClaimRequest) (wire.ClaimResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("claim"); err != nil {
		return wire.ClaimResponse{}, err
	}
	resp := wire.ClaimResponse{Cancel: f.cancelList(req.InFlight)}
	if len(req.Results) > 0 && f.refuseWithResults > 0 {
		f.refuseWithResults--
		f.refusedWithResults++
		return wire.ClaimResponse{}, &client.APIError{StatusCode: 400, Code: "invalid_request", Message: "injected refusal"}
	}
	if len(req.Results) > 0 {
		// Recorded first, as the API does; an expired lease is an outcome here, never a 409.
		f.resultsWithClaims += len(req.Results)
		resp.Outcomes = f.record(req.Results)
	}
	for _, it := range req.Jobs {
		f.claims[it.JobID]++
		j := f.jobs[it.JobID]
		switch {
		case j == nil:
			resp.Refused = append(resp.Refused, wire.ClaimRefusal{JobID: it.JobID, Reason: wire.ReasonNotFound})
		case f.refuse[it.JobID] != "":
			resp.Refused = append(resp.Refused, wire.ClaimRefusal{JobID: it.JobID, Reason: f.refuse[it.JobID]})
		case f.roomAfter[it.JobID] != "" && f.results[f.roomAfter[it.JobID]].JobID == "":
			resp.Refused = append(resp.Refused, wire.ClaimRefusal{JobID: it.JobID, Reason: wire.ReasonRetryLater, Detail: "no_capacity"})
		case j.status != "pending":
			resp.Refused = append(resp.Refused, wire.ClaimRefusal{JobID: it.JobID, Reason: wire.ReasonNotPending})
		default:
			j.status = "claimed"
			j.attempt++
			resp.Claimed = append(resp.Claimed, wire.ClaimedJob{JobID: it.JobID, Type: j.typ, Payload: j.payload,
				Attempt: j.attempt, Timeout: wire.Duration(j.timeout), LeaseToken: "lease-" + it.JobID})
		}
	}
	return resp, nil
}

func (f *fakeAPI) Start(_ context.Context, req wire.StartRequest) (wire.StartResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("start"); err != nil {
		return wire.StartResponse{}, err
	}
	for _, id := range req.JobIDs {
		if _, done := f.results[id]; done {
			f.startAfterResult++
		}
		f.started[id] = true
	}
	return wire.StartResponse{Cancel: f.cancelList(req.JobIDs)}, nil
}

func (f *fakeAPI) Complete(_ context.Context, req wire.CompleteRequest) (wire.CompleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("complete"); err != nil {
		return wire.CompleteResponse{}, err
	}
	resp := wire.CompleteResponse{Cancel: f.cancelList(req.InFlight)}
	allExpired := len(req.Results) > 0
	for _, r := range req.Results {
		allExpired = allExpired && f.expired[r.LeaseToken]
	}
	if allExpired {
		for _, r := range req.Results {
			f.outcomes[r.JobID] = wire.OutcomeLeaseExpired
		}
		return wire.CompleteResponse{}, &client.APIError{StatusCode: 409, Code: wire.CodeLeaseExpired, Message: "expired"}
	}
	resp.Outcomes = f.record(req.Results)
	return resp, nil
}

// record records results and returns their outcomes; f.mu is held.
func (f *fakeAPI) record(results []wire.JobResult) []wire.CompleteOutcome {
	var out []wire.CompleteOutcome
	for _, r := range results {
		if f.expired[r.LeaseToken] {
			f.outcomes[r.JobID] = wire.OutcomeLeaseExpired
			out = append(out, wire.CompleteOutcome{JobID: r.JobID, Outcome: wire.OutcomeLeaseExpired})
			continue
		}
		if !f.started[r.JobID] {
			f.unstartedResults++
		}
		outcome := wire.OutcomeDone
		switch {
		case f.cancelled[r.JobID]:
			outcome = wire.OutcomeStale
		case r.Status == wire.ResultFailed:
			outcome = wire.OutcomeRetry
		}
		f.results[r.JobID] = r
		f.outcomes[r.JobID] = outcome
		out = append(out, wire.CompleteOutcome{JobID: r.JobID, Outcome: outcome, Status: outcome})
	}
	return out
}

func (f *fakeAPI) RenewLeases(_ context.Context, req wire.RenewRequest) (wire.RenewResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("renew"); err != nil {
		return wire.RenewResponse{}, err
	}
	f.renewals = append(f.renewals, req)
	resp := wire.RenewResponse{Reserved: f.reserved}
	for _, t := range req.Tokens {
		if f.gone[t] {
			resp.Gone = append(resp.Gone, wire.GoneLease{Token: t, Status: wire.LeaseExpired})
		} else {
			resp.Renewed = append(resp.Renewed, wire.RenewedLease{Token: t, ExpiresAt: time.Now().Add(time.Minute)})
		}
	}
	return resp, nil
}

func (f *fakeAPI) outcome(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outcomes[id]
}

func (f *fakeAPI) result(id string) (wire.JobResult, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.results[id]
	return r, ok
}

func (f *fakeAPI) resultCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.results)
}

// bundle is what a worker test needs.
type bundle struct {
	api     *fakeAPI
	streams *streams.Client
	reg     *Registry
	log     *slog.Logger
}

func setup(t *testing.T) *bundle {
	t.Helper()
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	return &bundle{
		api:     newFakeAPI(),
		streams: streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)}),
		reg:     NewRegistry(),
		log:     testLogger(),
	}
}

// testLogger is silent unless ORCH_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("ORCH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// jobType returns a job type whose name is also its stream and handler.
func jobType(name, handler string) *config.JobType {
	return &config.JobType{Name: name, Stream: name, Handler: handler, Timeout: time.Minute}
}

// cfg returns a fast-moving worker configuration for types.
func (b *bundle) cfg(types ...*config.JobType) Config {
	return Config{
		WorkerID: "w1", PoolID: "p1", NodeID: "n1", Types: types,
		Concurrency: 8, Batch: 16, Block: 50 * time.Millisecond,
		API: b.api, Streams: b.streams, Registry: b.reg, Logger: b.log,
		ShutdownGrace: 10 * time.Second, FlushTimeout: 5 * time.Second,
		RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, RetryLaterDelay: 20 * time.Millisecond,
	}
}

// publish adds jobs to the fake API (unless typ is "") and their entries to the stream.
func (b *bundle) publish(t *testing.T, stream, typ, payload string, ids ...string) {
	t.Helper()
	msgs := make([]streams.Message, len(ids))
	for i, id := range ids {
		if typ != "" {
			b.api.add(id, typ, payload)
		}
		msgs[i] = streams.Message{Stream: stream, JobID: id, Type: typ}
	}
	_, err := b.streams.Publish(context.Background(), msgs)
	require.NoError(t, err)
}

// start runs a worker; stop cancels it and requires a nil return within a deadline.
func (b *bundle) start(t *testing.T, cfg Config) (w *Worker, stop func()) {
	t.Helper()
	w, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("worker did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// requirePending waits until the group of stream has n entries pending.
func (b *bundle) requirePending(t *testing.T, typ string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := b.streams.PendingCount(context.Background(), typ, streams.GroupName(typ))
		return err == nil && got == n
	}, 10*time.Second, 5*time.Millisecond, "pending entries of %s never reached %d", typ, n)
}

func jobIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return ids
}

// blockingHandler runs until its gate closes or its context ends, counting concurrent runs.
type blockingHandler struct {
	gate    chan struct{}
	running chan string // receives the id of every started job (buffered)
	mu      sync.Mutex
	cur     int
	max     int
}

func newBlockingHandler(buf int) *blockingHandler {
	return &blockingHandler{gate: make(chan struct{}), running: make(chan string, buf)}
}

func (h *blockingHandler) Run(ctx context.Context, job Job) (json.RawMessage, error) {
	h.mu.Lock()
	h.cur++
	h.max = max(h.max, h.cur)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.cur--
		h.mu.Unlock()
	}()
	h.running <- job.ID
	select {
	case <-h.gate:
		return json.RawMessage(`{"ok":true}`), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("blocked job stopped: %w", errors.Join(ctx.Err(), context.Cause(ctx)))
	}
}

func (h *blockingHandler) counts() (cur, peak int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur, h.max
}
