package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// clock is a test clock that only moves when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type bundle struct {
	eng     *engine.Engine
	leases  *leases.Manager
	store   store.Store
	streams *streams.Client
	clock   *clock
	cfg     *config.Config
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st := testenv.MySQLStore(t)
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	cfg.JobTypes["noop"].MaxAttempts = 2
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	ck := &clock{now: time.Now().UTC().Truncate(time.Second)}
	lm := engine.NewLeaseManager(st, cfg, leases.Options{Now: ck.Now})
	eng := engine.New(st, sc, cfg, engine.Options{Now: ck.Now, Leases: lm})
	t.Cleanup(func() { eng.FlushMarks(context.Background()) }) // before the store closes
	return &bundle{
		eng:     eng,
		leases:  lm,
		store:   st,
		streams: sc,
		clock:   ck,
		cfg:     cfg,
	}
}

var idSeq atomic.Int64

func uid(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), idSeq.Add(1))
}

func (b *bundle) submit(t *testing.T, typ string) store.Job {
	t.Helper()
	job, created, err := b.eng.Submit(context.Background(), engine.SubmitParams{
		JobID: uid("job"), Type: typ, Agent: "tester", Payload: json.RawMessage(`{"x":1}`), Actor: "agent:tester",
	})
	require.NoError(t, err)
	require.True(t, created)
	b.eng.FlushMarks(context.Background()) // as if outbox.MarkDelay had passed
	return job
}

func (b *bundle) claim(t *testing.T, worker string, ids ...string) engine.ClaimResult {
	t.Helper()
	items := make([]engine.ClaimItem, len(ids))
	for i, id := range ids {
		items[i] = engine.ClaimItem{JobID: id, Stream: "noop"}
	}
	res, err := b.eng.Claim(context.Background(), engine.ClaimParams{WorkerID: worker, Items: items})
	require.NoError(t, err)
	return res
}

// lease reads a lease by token. A lease held in a job row (leases.InJobRow) is active while
// its job holds it; once ended, its status is what the audit trail recorded: expired by the
// purger (a lease.expired row), released otherwise.
func (b *bundle) lease(t *testing.T, token string) store.Lease {
	t.Helper()
	jobID, inRow := leases.JobOfToken(token)
	if !inRow {
		l, err := b.store.LeaseGet(context.Background(), token, false)
		require.NoError(t, err)
		return l
	}
	j := b.job(t, jobID)
	if l, ok := leases.JobLease(&j, "", b.cfg.Leases.TTL); ok && j.LeaseToken == token {
		return l
	}
	l := store.Lease{Token: token, JobID: jobID, Mode: store.LeaseCPU, Status: store.LeaseReleased}
	evs, err := b.store.AuditList(context.Background(), store.AuditListParams{JobID: jobID, Limit: 1000})
	require.NoError(t, err)
	for _, ev := range evs {
		if ev.LeaseToken == token && ev.EventType == leases.EventExpired {
			l.Status = store.LeaseExpired
		}
	}
	return l
}

func (b *bundle) auditTypes(t *testing.T, jobID string) []string {
	t.Helper()
	evs, err := b.store.AuditList(context.Background(), store.AuditListParams{JobID: jobID, Limit: 100})
	require.NoError(t, err)
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.EventType
	}
	return out
}

// auditEvent returns the job's one audit row of type typ.
func (b *bundle) auditEvent(t *testing.T, jobID, typ string) store.AuditEvent {
	t.Helper()
	evs, err := b.store.AuditList(context.Background(), store.AuditListParams{JobID: jobID, Limit: 100})
	require.NoError(t, err)
	var found []store.AuditEvent
	for _, e := range evs {
		if e.EventType == typ {
			found = append(found, e)
		}
	}
	require.Len(t, found, 1, "audit rows %s of job %s", typ, jobID)
	return found[0]
}

func TestSubmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("PersistsPublishesAndAudits", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		got, err := b.eng.Get(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, store.JobPending, got.Status)
		require.True(t, got.Enqueued, "marked enqueued (b.submit writes the marks at once)")
		require.NotEmpty(t, got.StreamID)
		require.Equal(t, 2, got.MaxAttempts)
		require.JSONEq(t, `{"x":1}`, string(got.Payload))
		n, err := b.streams.Len(ctx, "noop")
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.Equal(t, []string{engine.EventSubmitted}, b.auditTypes(t, job.ID))
	})

	t.Run("SameIDReturnsExisting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		again, created, err := b.eng.Submit(ctx, engine.SubmitParams{
			JobID: job.ID, Type: "noop", Agent: "tester", Payload: json.RawMessage(`{ "x": 1 }`),
		})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, job.ID, again.ID)
		require.JSONEq(t, `{"x":1}`, string(again.Payload))
		require.Len(t, b.auditTypes(t, job.ID), 1)
		n, err := b.streams.Len(ctx, "noop")
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "a resubmit publishes nothing")
	})

	t.Run("SameIDOtherAgentConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: job.ID, Type: "noop", Agent: "intruder", Payload: json.RawMessage(`1`)})
		require.ErrorIs(t, err, store.ErrConflict)
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		big := json.RawMessage(`"` + strings.Repeat("x", int(b.cfg.MaxPayloadBytes)) + `"`)
		cases := []struct {
			name  string
			p     engine.SubmitParams
			field string
		}{
			{"MissingType", engine.SubmitParams{Agent: "a", Payload: json.RawMessage(`{}`)}, "type"},
			{"UnknownType", engine.SubmitParams{Type: "nope", Agent: "a", Payload: json.RawMessage(`{}`)}, "type"},
			{"MissingAgent", engine.SubmitParams{Type: "noop", Payload: json.RawMessage(`{}`)}, "agent"},
			{"BadAgent", engine.SubmitParams{Type: "noop", Agent: "a b", Payload: json.RawMessage(`{}`)}, "agent"},
			{"MissingPayload", engine.SubmitParams{Type: "noop", Agent: "a"}, "payload"},
			{"BadPayload", engine.SubmitParams{Type: "noop", Agent: "a", Payload: json.RawMessage(`{`)}, "payload"},
			{"HugePayload", engine.SubmitParams{Type: "noop", Agent: "a", Payload: big}, "payload"},
			{"BadJobID", engine.SubmitParams{JobID: "has space", Type: "noop", Agent: "a", Payload: json.RawMessage(`{}`)}, "job_id"},
			{"LongJobID", engine.SubmitParams{JobID: strings.Repeat("a", 129), Type: "noop", Agent: "a", Payload: json.RawMessage(`{}`)}, "job_id"},
			{"MaxAttempts", engine.SubmitParams{Type: "noop", Agent: "a", Payload: json.RawMessage(`{}`), MaxAttempts: 101}, "max_attempts"},
			{"Timeout", engine.SubmitParams{Type: "noop", Agent: "a", Payload: json.RawMessage(`{}`), Timeout: 25 * time.Hour}, "timeout"},
		}
		for _, tc := range cases {
			id := uid("bad")
			if tc.p.JobID == "" {
				tc.p.JobID = id
			}
			_, _, err := b.eng.Submit(ctx, tc.p)
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve, tc.name)
			require.Equal(t, tc.field, ve.Field, tc.name)
			_, err = b.eng.Get(ctx, tc.p.JobID)
			require.ErrorIs(t, err, store.ErrNotFound, "%s left a row", tc.name)
		}
	})
}

func TestClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ClaimsAndRefuses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a, c := b.submit(t, "noop"), b.submit(t, "noop")
		res := b.claim(t, "w1", a.ID, "missing-"+a.ID)
		require.Len(t, res.Claimed, 1)
		require.Equal(t, store.JobClaimed, res.Claimed[0].Status)
		require.Equal(t, 1, res.Claimed[0].Attempts)
		require.Equal(t, "w1", res.Claimed[0].WorkerID)
		require.Equal(t, []engine.Refusal{{JobID: "missing-" + a.ID, Reason: engine.RefusedNotFound}}, res.Refused)

		res = b.claim(t, "w2", a.ID, c.ID, c.ID)
		require.Len(t, res.Claimed, 1)
		require.Equal(t, c.ID, res.Claimed[0].ID)
		require.ElementsMatch(t, []engine.Refusal{
			{JobID: a.ID, Reason: engine.RefusedNotPending},
			{JobID: c.ID, Reason: engine.RefusedNotPending},
		}, res.Refused)
		require.Equal(t, []string{engine.EventSubmitted, "job.pending->claimed"}, b.auditTypes(t, a.ID),
			"the claim row records the lease's grant")
	})

	t.Run("ConcurrentClaimsOneWinner", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: fmt.Sprintf("w%d", i), Items: []engine.ClaimItem{{JobID: job.ID}}})
				require.NoError(t, err)
				wins.Add(int32(len(res.Claimed)))
			}()
		}
		wg.Wait()
		require.EqualValues(t, 1, wins.Load())
		got, err := b.eng.Get(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, 1, got.Attempts)
	})
}

func TestComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OutputNotJSONStoredAsNull", func(t *testing.T) {
		// The engine is the last check of a result that the API did not decode: the schema
		// has none since migration 007.
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		tok := b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		res, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: tok, Done: true, Output: json.RawMessage(`{nope`)},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeDone, res.Outcomes[0].Outcome)
		got, err := b.eng.Get(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, store.JobDone, got.Status)
		require.Equal(t, "null", string(got.Result))
	})

	t.Run("CallbackMarksTheEndingRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.cfg.Webhooks.CallbackSecret, b.cfg.Webhooks.AllowPrivate = "s3cret", true
		hooked, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: uid("job"), Type: "noop", Agent: "tester",
			Payload: json.RawMessage(`{}`), CallbackURL: "http://127.0.0.1:9/cb", Actor: "agent:tester"})
		require.NoError(t, err)
		plain := b.submit(t, "noop")
		b.eng.FlushMarks(ctx)
		claimed := b.claim(t, "w1", hooked.ID, plain.ID).Claimed
		require.Len(t, claimed, 2)
		var results []engine.Result
		for _, j := range claimed {
			results = append(results, engine.Result{JobID: j.ID, Attempt: 1, LeaseToken: j.LeaseToken, Done: true})
		}
		_, err = b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: results})
		require.NoError(t, err)
		// Only the row that ends the job with a callback says so: the webhooks' tail reads the
		// jobs of those rows alone.
		require.Contains(t, string(b.auditEvent(t, hooked.ID, "job.running->done").Details), `"callback":true`)
		require.NotContains(t, string(b.auditEvent(t, hooked.ID, "job.pending->claimed").Details), `"callback"`)
		require.NotContains(t, string(b.auditEvent(t, plain.ID, "job.running->done").Details), `"callback"`)
	})

	t.Run("Done", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		tok := b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		cancel, err := b.eng.Start(ctx, engine.StartParams{WorkerID: "w1", JobIDs: []string{job.ID}})
		require.NoError(t, err)
		require.Empty(t, cancel)
		res, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: tok, Done: true, Output: json.RawMessage(`{"ok":true}`)},
		}})
		require.NoError(t, err)
		require.Equal(t, []engine.Outcome{{JobID: job.ID, Outcome: engine.OutcomeDone, Status: store.JobDone}}, res.Outcomes)
		got, err := b.eng.Get(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, store.JobDone, got.Status)
		require.JSONEq(t, `{"ok":true}`, string(got.Result))
		require.NotNil(t, got.StartedAt)
		require.NotNil(t, got.FinishedAt)
		require.Equal(t, []string{engine.EventSubmitted, "job.pending->claimed", "job.claimed->running",
			"job.running->done"}, b.auditTypes(t, job.ID))
		require.Equal(t, store.LeaseReleased, b.lease(t, tok).Status, "completion releases the lease")
		require.JSONEq(t, fmt.Sprintf(`{"agent":"tester","max_attempts":%d,"type":"noop"}`, job.MaxAttempts),
			string(b.auditEvent(t, job.ID, engine.EventSubmitted).Details))
		require.True(t, leases.InJobRow(tok), "a job without a GPU holds its lease in its own row")
		// The job's rows record its lease: the claim its grant, the last transition its release.
		claimed := b.auditEvent(t, job.ID, "job.pending->claimed")
		require.Equal(t, tok, claimed.LeaseToken)
		var details struct {
			Lease struct {
				Mode  string `json:"mode"`
				Agent string `json:"agent"`
				TTLMS int64  `json:"ttl_ms"`
			} `json:"lease"`
		}
		require.NoError(t, json.Unmarshal(claimed.Details, &details))
		require.Equal(t, "cpu", details.Lease.Mode)
		require.Equal(t, "tester", details.Lease.Agent)
		require.Positive(t, details.Lease.TTLMS)
		done := b.auditEvent(t, job.ID, "job.running->done")
		require.Equal(t, tok, done.LeaseToken, "the row names the lease its transition ended")
		require.JSONEq(t, `{"attempt":1,"lease_released":true}`, string(done.Details))

		// A second report of the same attempt changes nothing.
		res, err = b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{{JobID: job.ID, Attempt: 1, LeaseToken: tok, Done: true}}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeStale, res.Outcomes[0].Outcome)
		require.Len(t, b.auditTypes(t, job.ID), 4)
	})

	t.Run("DoneWithoutStartRecordsStart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		claimedAt := b.clock.Now()
		tok := b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		b.clock.Add(2 * time.Second)
		res, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: tok, Done: true, Elapsed: 500 * time.Millisecond}}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeDone, res.Outcomes[0].Outcome)
		require.Equal(t, []string{engine.EventSubmitted, "job.pending->claimed",
			"job.claimed->running", "job.running->done"}, b.auditTypes(t, job.ID))
		got, err := b.eng.Get(ctx, job.ID)
		require.NoError(t, err)
		require.WithinDuration(t, claimedAt.Add(1500*time.Millisecond), *got.StartedAt, time.Millisecond,
			"the start is dated by the worker's elapsed time")
		require.WithinDuration(t, claimedAt.Add(2*time.Second), *got.FinishedAt, time.Millisecond)

		// An elapsed time longer than the attempt is clamped to the claim.
		job = b.submit(t, "noop")
		claimedAt = b.clock.Now()
		tok = b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		b.clock.Add(time.Second)
		_, err = b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: tok, Done: true, Elapsed: time.Hour}}})
		require.NoError(t, err)
		got, err = b.eng.Get(ctx, job.ID)
		require.NoError(t, err)
		require.WithinDuration(t, claimedAt, *got.StartedAt, time.Millisecond)
	})

	t.Run("StaleFromOtherWorkerOrAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		tok := b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		res, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w2", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: tok, Done: true},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeStale, res.Outcomes[0].Outcome)
		res, err = b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 7, LeaseToken: tok, Done: true},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeStale, res.Outcomes[0].Outcome)
		got, err := b.eng.Get(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, store.JobClaimed, got.Status)
	})

	t.Run("FailureRetriesWithBackoffThenDeadLetters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		disp := outbox.NewDispatcher(b.eng, outbox.DispatcherConfig{})
		job := b.submit(t, "noop") // max_attempts 2
		tok := b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		res, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: tok, Error: "boom"},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.Outcome{JobID: job.ID, Outcome: engine.OutcomeRetry, Status: store.JobPending}, res.Outcomes[0])
		got, err := b.eng.Get(ctx, job.ID)
		require.NoError(t, err)
		require.False(t, got.Enqueued)
		require.Equal(t, "boom", got.LastError)
		require.True(t, got.AvailableAt.After(b.clock.Now()), "backoff puts the retry in the future")
		require.Equal(t, store.LeaseReleased, b.lease(t, tok).Status)
		retry := b.auditEvent(t, job.ID, "job.failed->pending")
		require.Equal(t, tok, retry.LeaseToken, "the retry row names the lease the attempt gave back")
		require.Contains(t, string(retry.Details), `"lease_released":true`)
		require.Equal(t, tok, b.auditEvent(t, job.ID, "job.claimed->failed").LeaseToken)

		// Not due: neither claimable nor published.
		res2 := b.claim(t, "w1", job.ID)
		require.Equal(t, engine.RefusedNotDue, res2.Refused[0].Reason)
		before, err := b.streams.Len(ctx, "noop")
		require.NoError(t, err)
		_, err = disp.RunOnce(ctx)
		require.NoError(t, err)
		after, err := b.streams.Len(ctx, "noop")
		require.NoError(t, err)
		require.Equal(t, before, after)

		// Due: the dispatcher publishes it once.
		b.clock.Add(2 * time.Second)
		_, err = disp.RunOnce(ctx)
		require.NoError(t, err)
		after, err = b.streams.Len(ctx, "noop")
		require.NoError(t, err)
		require.Equal(t, before+1, after)
		got, err = b.eng.Get(ctx, job.ID)
		require.NoError(t, err)
		require.True(t, got.Enqueued)

		res2 = b.claim(t, "w2", job.ID)
		require.Len(t, res2.Claimed, 1)
		require.Equal(t, 2, res2.Claimed[0].Attempts)
		res, err = b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w2", Results: []engine.Result{
			{JobID: job.ID, Attempt: 2, LeaseToken: res2.Claimed[0].LeaseToken, Error: "boom again"},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeDeadLetter, res.Outcomes[0].Outcome)
		require.Equal(t, store.JobDeadLetter, res.Outcomes[0].Status)
		require.Contains(t, b.auditTypes(t, job.ID), "job.failed->dead_letter")
	})

	t.Run("NonRetryableDeadLettersAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		tok := b.claim(t, "w1", job.ID).Claimed[0].LeaseToken
		res, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: tok, Error: "bad input", NonRetryable: true},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeDeadLetter, res.Outcomes[0].Outcome)
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Pending", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		got, err := b.eng.Cancel(ctx, job.ID, "admin:test")
		require.NoError(t, err)
		require.Equal(t, store.JobCancelled, got.Status)
		res := b.claim(t, "w1", job.ID)
		require.Equal(t, engine.RefusedNotPending, res.Refused[0].Reason)
	})

	t.Run("RunningWorkerIsTold", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job, other, kept, foreign := b.submit(t, "noop"), b.submit(t, "noop"), b.submit(t, "noop"), b.submit(t, "noop")
		claimed := b.claim(t, "w1", job.ID, other.ID, kept.ID)
		b.claim(t, "w2", foreign.ID)
		_, err := b.eng.Start(ctx, engine.StartParams{WorkerID: "w1", JobIDs: []string{job.ID, other.ID}})
		require.NoError(t, err)
		_, err = b.eng.Cancel(ctx, job.ID, "admin:test")
		require.NoError(t, err)
		res, err := b.eng.Complete(ctx, engine.CompleteParams{
			WorkerID: "w1",
			Results:  []engine.Result{{JobID: other.ID, Attempt: 1, LeaseToken: claimed.Leases[other.ID].Token, Done: true}},
			InFlight: []string{job.ID, kept.ID, "missing-" + job.ID, foreign.ID},
		})
		require.NoError(t, err)
		require.Equal(t, []string{job.ID, "missing-" + job.ID, foreign.ID}, res.Cancel,
			"cancelled, gone and another worker's; not the claimed job it still holds")
		res, err = b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{{JobID: job.ID, Attempt: 1, LeaseToken: claimed.Leases[job.ID].Token, Done: true}}})
		require.NoError(t, err)
		require.Equal(t, engine.Outcome{JobID: job.ID, Outcome: engine.OutcomeStale, Status: store.JobCancelled}, res.Outcomes[0])
	})

	t.Run("StartIsTold", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job, kept, foreign := b.submit(t, "noop"), b.submit(t, "noop"), b.submit(t, "noop")
		b.claim(t, "w1", job.ID, kept.ID)
		b.claim(t, "w2", foreign.ID)
		_, err := b.eng.Cancel(ctx, job.ID, "admin:test")
		require.NoError(t, err)
		cancel, err := b.eng.Start(ctx, engine.StartParams{WorkerID: "w1",
			JobIDs: []string{job.ID, kept.ID, kept.ID, "missing-" + job.ID, foreign.ID}})
		require.NoError(t, err)
		require.Equal(t, []string{job.ID, "missing-" + job.ID, foreign.ID}, cancel,
			"cancelled, gone and another worker's; not the job it started")
		require.Equal(t, store.JobRunning, b.job(t, kept.ID).Status)
		require.Equal(t, store.JobClaimed, b.job(t, foreign.ID).Status, "another worker's job is not started")
		require.Equal(t, []string{engine.EventSubmitted, "job.pending->claimed", "job.claimed->running"},
			b.auditTypes(t, kept.ID), "an id listed twice starts once")
	})

	t.Run("TerminalAndMissing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job := b.submit(t, "noop")
		_, err := b.eng.Cancel(ctx, job.ID, "admin:test")
		require.NoError(t, err)
		_, err = b.eng.Cancel(ctx, job.ID, "admin:test")
		require.ErrorIs(t, err, engine.ErrJobTerminal)
		_, err = b.eng.Cancel(ctx, "missing-"+job.ID, "admin:test")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// TestSubmitMarksEnqueuedAfterTheCommit checks the order of a small submit: the answer at the
// commit, then the entry, then the mark, each on its own.
func TestSubmitMarksEnqueuedAfterTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	outs := b.eng.SubmitMany(ctx, []engine.SubmitParams{
		{JobID: uid("late"), Type: "noop", Agent: "tester", Payload: json.RawMessage(`{}`), Actor: "agent:tester"},
		{JobID: uid("late"), Type: "noop", Agent: "tester", Payload: json.RawMessage(`{}`), Actor: "agent:tester"},
	})
	for _, o := range outs {
		require.NoError(t, o.Err)
		require.True(t, o.Created)
		got, err := b.eng.Get(ctx, o.Job.ID)
		require.NoError(t, err)
		require.Equal(t, store.JobPending, got.Status, "the answer comes after the commit")
	}
	// The entries and then the marks follow, a moment later.
	require.Eventually(t, func() bool {
		entries := b.streamJobs(t, "noop")
		for _, o := range outs {
			got, err := b.eng.Get(ctx, o.Job.ID)
			if err != nil || !got.Enqueued || got.StreamID == "" || !slices.Contains(entries, o.Job.ID) {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond)
}

func TestSubmitOfManyJobsMarksThemInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ps := make([]engine.SubmitParams, 64) // publishInTxMin
	ids := make([]string, len(ps))
	for i := range ps {
		ids[i] = uid("bulk")
		ps[i] = engine.SubmitParams{JobID: ids[i], Type: "noop", Agent: "tester", Payload: json.RawMessage(`{}`), Actor: "agent:tester"}
	}
	for _, o := range b.eng.SubmitMany(ctx, ps) {
		require.NoError(t, o.Err)
		require.True(t, o.Job.Enqueued)
	}
	jobs, err := b.store.JobGetMany(ctx, ids, false)
	require.NoError(t, err)
	require.Len(t, jobs, len(ids))
	for _, j := range jobs {
		require.True(t, j.Enqueued, "a bulk submit's marks commit with its jobs: job %s", j.ID)
		require.NotEmpty(t, j.StreamID)
	}
}

func TestDispatcherPublishesUnenqueuedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// A row committed by a submit that crashed before its XADD.
	id := uid("crashed")
	_, inserted, err := b.store.JobInsert(ctx, store.JobInsertParams{
		ID: id, Type: "noop", Agent: "tester", Payload: json.RawMessage(`{}`), MaxAttempts: 1,
		AvailableAt: b.clock.Now(), Timeout: time.Minute, Now: b.clock.Now(),
	})
	require.NoError(t, err)
	require.True(t, inserted)
	disp := outbox.NewDispatcher(b.eng, outbox.DispatcherConfig{Interval: 10 * time.Millisecond})
	// A job never attempted is its submit's to publish for PublishGrace.
	b.clock.Add(outbox.PublishGrace - time.Microsecond)
	n, err := disp.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "within the grace the submit publishes, not the dispatcher")
	b.clock.Add(time.Microsecond)
	require.NoError(t, disp.Start(ctx))
	t.Cleanup(disp.Stop)

	group := streams.GroupName("noop")
	require.NoError(t, b.streams.EnsureGroup(ctx, "noop", group))
	deadline := time.Now().Add(10 * time.Second)
	var got []streams.Delivery
	for len(got) == 0 && time.Now().Before(deadline) {
		ds, err := b.streams.Read(ctx, streams.ReadParams{Group: group, Consumer: "t", Streams: []string{"noop"}, Count: 10, Block: 100 * time.Millisecond})
		require.NoError(t, err)
		for _, d := range ds {
			if d.JobID == id {
				got = append(got, d)
			}
		}
	}
	require.Len(t, got, 1, "the dispatcher delivers the job")
	// The mark follows the XADD.
	require.Eventually(t, func() bool {
		job, err := b.eng.Get(ctx, id)
		return err == nil && job.Enqueued && job.StreamID == got[0].ID
	}, 10*time.Second, 10*time.Millisecond)
	disp.Stop()
	disp.Stop() // idempotent
}
