package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// batchOf is a batch of n noop jobs of agent with ids prefix-0000, prefix-0001, ...
func batchOf(n int, prefix, agent string) wire.SubmitBatchRequest {
	req := wire.SubmitBatchRequest{Jobs: make([]wire.SubmitRequest, n)}
	for i := range req.Jobs {
		req.Jobs[i] = wire.SubmitRequest{JobID: fmt.Sprintf("%s-%04d", prefix, i), Type: "noop", Agent: agent,
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return req
}

// submitBatch posts body to /jobs/submit_batch as who and requires a 200 with one result per job.
func (b *bundle) submitBatch(t *testing.T, who string, body any, jobs int) wire.SubmitBatchResponse {
	t.Helper()
	rec := b.request(t, http.MethodPost, "/jobs/submit_batch", who, body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	resp := decode[wire.SubmitBatchResponse](t, rec)
	require.Len(t, resp.Results, jobs)
	return resp
}

// allJobs lists every job of agent, page by page.
func (b *bundle) allJobs(t *testing.T, agent string) []store.Job {
	t.Helper()
	var all []store.Job
	p := store.JobListParams{Agent: agent, Limit: ListLimitMax}
	for {
		jobs, err := b.st.JobList(context.Background(), p)
		require.NoError(t, err)
		all = append(all, jobs...)
		if len(jobs) < p.Limit {
			return all
		}
		last := jobs[len(jobs)-1]
		p.After = &store.JobCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// requireEnqueued checks that every job of agent is marked enqueued (published); it polls, so
// that it holds however the engine orders the mark and the answer.
func (b *bundle) requireEnqueued(t *testing.T, agent string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, j := range b.allJobs(t, agent) {
			if !j.Enqueued {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every job of %s is marked enqueued", agent)
}

// TestSubmitBatchOfMax: a full batch is created in request order, each job written once and
// published once; the same batch again creates and publishes nothing.
func TestSubmitBatchOfMax(t *testing.T) {
	t.Parallel()
	b := setup(t) // its own bundle: the noop stream holds this test's entries only
	ctx := context.Background()
	req := batchOf(SubmitBatchMax, "bulk", "bulk")

	resp := b.submitBatch(t, "admin", req, SubmitBatchMax)
	require.Equal(t, SubmitBatchMax, resp.Created)
	require.Zero(t, resp.Existing)
	require.Zero(t, resp.Failed)
	for i, r := range resp.Results {
		require.Equal(t, wire.SubmitBatchResult{JobID: req.Jobs[i].JobID, Status: "pending", Created: true}, r)
	}

	b.requireEnqueued(t, "bulk")
	jobs := b.allJobs(t, "bulk")
	require.Len(t, jobs, SubmitBatchMax)
	ids, entries := map[string]bool{}, map[string]bool{}
	for _, j := range jobs {
		require.False(t, ids[j.ID], "job %s listed twice", j.ID)
		ids[j.ID] = true
		require.Equal(t, store.JobPending, j.Status)
		require.NotEmpty(t, j.StreamID, "job %s published to the stream after the commit", j.ID)
		require.False(t, entries[j.StreamID], "stream entry %s of two jobs", j.StreamID)
		entries[j.StreamID] = true
	}
	for _, sj := range req.Jobs {
		require.True(t, ids[sj.JobID], "job %s is in the database", sj.JobID)
	}
	job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/bulk-0042", "admin", nil))
	require.JSONEq(t, `{"n":42}`, string(job.Payload))
	require.Equal(t, 3, job.MaxAttempts, "the type's default")
	n, err := b.sc.Len(ctx, "noop")
	require.NoError(t, err)
	require.EqualValues(t, SubmitBatchMax, n, "one stream entry per job")

	t.Run("ResubmittedCreatesNothing", func(t *testing.T) {
		resp := b.submitBatch(t, "admin", req, SubmitBatchMax)
		require.Equal(t, wire.SubmitBatchResponse{Results: resp.Results, Existing: SubmitBatchMax}, resp)
		for i, r := range resp.Results {
			require.Equal(t, wire.SubmitBatchResult{JobID: req.Jobs[i].JobID, Status: "pending"}, r)
		}
		require.Len(t, b.allJobs(t, "bulk"), SubmitBatchMax)
		n, err := b.sc.Len(ctx, "noop")
		require.NoError(t, err)
		require.EqualValues(t, SubmitBatchMax, n, "nothing published again")
	})
}

// TestSubmitBatchMixed: every job is answered on its own, as POST /jobs/submit would answer it
// alone, and a refused job does not hold back the others.
func TestSubmitBatchMixed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, p := range []engine.SubmitParams{
		{JobID: "alice-old", Type: "noop", Agent: "alice", Payload: json.RawMessage(`{}`), Actor: "test"},
		{JobID: "bob-old", Type: "noop", Agent: "bob", Payload: json.RawMessage(`{}`), Actor: "test"},
	} {
		_, created, err := b.eng.Submit(ctx, p)
		require.NoError(t, err)
		require.True(t, created)
	}
	body := `{"jobs": [
		{"job_id": "m-new", "type": "noop", "payload": {"a": 1}},
		{"job_id": "m-type", "type": "rm_rf", "payload": {}},
		{"job_id": "has space", "type": "noop", "payload": {}},
		{"job_id": "m-nopayload", "type": "noop"},
		{"job_id": "alice-old", "type": "noop", "payload": {"other": true}},
		{"job_id": "m-bob", "type": "noop", "agent": "bob", "payload": {}},
		{"job_id": "bob-old", "type": "noop", "payload": {}},
		{"type": "noop", "payload": null, "max_attempts": 7, "timeout": "90s"},
		{"job_id": "m-attempts", "type": "noop", "payload": {}, "max_attempts": 0},
		{"job_id": "m-timeout", "type": "noop", "payload": {}, "timeout": "soon"},
		{"job_id": "m-new", "type": "noop", "payload": { "a" : 1 }},
		{"job_id": "m-new", "type": "noop", "payload": {"a": 2}},
		null
	]}`
	rec := b.request(t, http.MethodPost, "/jobs/submit_batch", "alice", body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Empty(t, rec.Header().Get("Retry-After"), "no admission control here")
	resp := decode[wire.SubmitBatchResponse](t, rec)
	require.Len(t, resp.Results, 13)

	ok := func(id, status string, created bool) wire.SubmitBatchResult {
		return wire.SubmitBatchResult{JobID: id, Status: status, Created: created}
	}
	failed := func(id, code, field string) wire.SubmitBatchResult {
		return wire.SubmitBatchResult{JobID: id, Error: &wire.ErrorDetail{Code: code, Field: field}}
	}
	generated := resp.Results[7].JobID
	require.Regexp(t, engine.JobIDPattern, generated)
	want := []wire.SubmitBatchResult{
		ok("m-new", "pending", true),
		failed("m-type", CodeInvalidRequest, "type"),
		failed("has space", CodeInvalidRequest, "job_id"),
		failed("m-nopayload", CodeInvalidRequest, "payload"),
		failed("alice-old", CodeIdempotencyMismatch, "payload"), // not the payload it was submitted with
		failed("m-bob", CodeForbidden, ""),
		failed("bob-old", CodeConflict, ""),
		ok(generated, "pending", true),
		failed("m-attempts", CodeInvalidRequest, "max_attempts"),
		failed("m-timeout", CodeInvalidRequest, "timeout"),
		ok("m-new", "pending", false),                       // the same id twice in a batch: the second finds the first
		failed("m-new", CodeIdempotencyMismatch, "payload"), // … and a third with another payload is refused
		failed("", CodeInvalidRequest, "type"),
	}
	for i, r := range resp.Results {
		if r.Error != nil {
			require.NotEmpty(t, r.Error.Message, "result %d", i)
			r.Error.Message = ""
		}
		require.Equal(t, want[i], r, "result %d", i)
	}
	require.Equal(t, 2, resp.Created)
	require.Equal(t, 1, resp.Existing)
	require.Equal(t, 10, resp.Failed)

	// The messages are those of the single submit.
	single := decode[wire.ErrorBody](t, b.request(t, http.MethodPost, "/jobs/submit", "alice",
		`{"job_id": "bob-old", "type": "noop", "payload": {}}`))
	require.Equal(t, single.Error.Message, decode[wire.SubmitBatchResponse](t, rec).Results[6].Error.Message)

	require.Len(t, b.allJobs(t, "alice"), 3, "alice-old, m-new and the generated one")
	b.requireEnqueued(t, "alice")
	require.Len(t, b.allJobs(t, "bob"), 1, "nothing written for bob")
	job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/m-new", "alice", nil))
	require.JSONEq(t, `{"a": 1}`, string(job.Payload), "the first of the id won")
	job = decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+generated, "alice", nil))
	require.Equal(t, 7, job.MaxAttempts)
	require.Equal(t, wire.Duration(90e9), job.Timeout)

	t.Run("AdminNamesAnyAgent", func(t *testing.T) {
		resp := b.submitBatch(t, "admin", wire.SubmitBatchRequest{Jobs: []wire.SubmitRequest{
			{JobID: "adm-carol", Type: "noop", Agent: "carol", Payload: json.RawMessage(`1`)},
			{JobID: "adm-dave", Type: "noop", Agent: "dave", Payload: json.RawMessage(`2`)},
			{JobID: "adm-none", Type: "noop", Payload: json.RawMessage(`3`)},
		}}, 3)
		require.Equal(t, 2, resp.Created)
		require.Equal(t, 1, resp.Failed)
		require.Equal(t, "agent", resp.Results[2].Error.Field, "an admin names the agent")
		require.Len(t, b.allJobs(t, "carol"), 1)
		require.Len(t, b.allJobs(t, "dave"), 1)
	})
}

// TestSubmitBatchBadJobs sends each bad submit of the single submit's table as the second job
// of a batch: a job the checks refuse fails alone, with the field the single submit names; a
// job that cannot be decoded refuses the whole request, naming it.
func TestSubmitBatchBadJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	whole := map[string]string{ // case → the field of the whole request's 400
		"NumericJobID": "jobs[1].job_id", "FractionalMaxAttempts": "jobs[1].max_attempts",
		"UnknownField": "jobs[1].urgency", "TypeIsNotAString": "jobs[1].type", "NotAnObject": "jobs[1]",
		"InvalidJSON": "", "SyntaxError": "", "TrailingGarbage": "", "TwoObjects": "", "Empty": "",
		"CaseMismatchedField": "jobs[1].Type", "DuplicateKey": "jobs[1].type", "InvalidUTF8Type": "jobs[1].type",
	}
	for i, c := range badSubmits("") {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			agent := fmt.Sprintf("bad-%d", i)
			bad := strings.ReplaceAll(c.body, `"agent":""`, fmt.Sprintf(`"agent":%q`, agent))
			body := fmt.Sprintf(`{"jobs":[{"type":"noop","agent":%q,"payload":{}},%s]}`, agent, bad)
			rec := b.request(t, http.MethodPost, "/jobs/submit_batch", "admin", body)
			if field, ok := whole[c.name]; ok {
				requireError(t, rec, http.StatusBadRequest, CodeInvalidRequest, field)
				require.Empty(t, b.allJobs(t, agent), "nothing written")
				return
			}
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			resp := decode[wire.SubmitBatchResponse](t, rec)
			require.Len(t, resp.Results, 2)
			require.True(t, resp.Results[0].Created, "the good job goes ahead")
			e := resp.Results[1].Error
			require.NotNil(t, e, "%+v", resp.Results[1])
			require.Equal(t, CodeInvalidRequest, e.Code)
			require.Equal(t, c.field, e.Field)
			require.NotEmpty(t, e.Message)
			require.Equal(t, 1, resp.Created)
			require.Equal(t, 1, resp.Failed)
			require.Len(t, b.allJobs(t, agent), 1)
		})
	}
}

// TestSubmitBatchRefusedWhole runs against a stack whose database is down: each request is
// refused before the engine is reached.
func TestSubmitBatchRefusedWhole(t *testing.T) {
	t.Parallel()
	b := setupDown(t)
	one := wire.SubmitBatchRequest{Jobs: []wire.SubmitRequest{{Type: "noop", Agent: "alice", Payload: []byte(`{}`)}}}

	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"NoJobs", `{"jobs": []}`, "jobs"},
		{"NullJobs", `{"jobs": null}`, "jobs"},
		{"MissingJobs", `{}`, "jobs"},
		{"TooManyJobs", batchOf(SubmitBatchMax+1, "over", "alice"), "jobs"},
		{"JobsNotAnArray", `{"jobs": {"type": "noop"}}`, "jobs"},
		{"UnknownField", `{"jobs": [{"type": "noop", "payload": {}}], "atomic": true}`, "atomic"},
		{"NotAnObject", `[{"type": "noop", "payload": {}}]`, ""},
		{"InvalidJSON", `{"jobs": [`, ""},
		{"Empty", ``, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			requireError(t, b.request(t, http.MethodPost, "/jobs/submit_batch", "admin", c.body),
				http.StatusBadRequest, CodeInvalidRequest, c.field)
		})
	}
	t.Run("OversizeBodyIs413", func(t *testing.T) {
		t.Parallel()
		require.EqualValues(t, SubmitBatchMaxBytes, b.srv.submitBatchLimit())
		pad := strings.Repeat(" ", SubmitBatchMaxBytes)
		rec := b.request(t, http.MethodPost, "/jobs/submit_batch", "admin", `{"jobs":[`+pad+`{"type":"noop","payload":{}}]}`)
		requireError(t, rec, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "")
	})
	t.Run("NoToken", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/jobs/submit_batch", "", one)
		requireError(t, rec, http.StatusUnauthorized, CodeUnauthorized, "")
		require.True(t, strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer"))
	})
	t.Run("UnknownToken", func(t *testing.T) {
		t.Parallel()
		requireError(t, b.request(t, http.MethodPost, "/jobs/submit_batch", "orch_not-a-configured-token", one),
			http.StatusUnauthorized, CodeUnauthorized, "")
	})
	t.Run("WorkerToken", func(t *testing.T) {
		t.Parallel()
		requireError(t, b.request(t, http.MethodPost, "/jobs/submit_batch", "worker", one),
			http.StatusForbidden, CodeForbidden, "")
	})
	t.Run("WrongMethod", func(t *testing.T) {
		t.Parallel()
		requireError(t, b.request(t, http.MethodDelete, "/jobs/submit_batch", "admin", nil),
			http.StatusMethodNotAllowed, CodeMethodNotAllowed, "")
	})

	// A well-formed batch is answered 200 even when no job could be written: each says why.
	t.Run("DatabaseDownFailsEachJob", func(t *testing.T) {
		t.Parallel()
		req := batchOf(3, "down", "alice")
		req.Jobs[1].Type = "rm_rf"
		resp := b.submitBatch(t, "alice", req, 3)
		require.Equal(t, 3, resp.Failed)
		for i, code := range []string{CodeUnavailable, CodeInvalidRequest, CodeUnavailable} {
			require.Equal(t, code, resp.Results[i].Error.Code, "result %d", i)
			require.Equal(t, req.Jobs[i].JobID, resp.Results[i].JobID)
			require.False(t, resp.Results[i].Created)
			require.Empty(t, resp.Results[i].Status)
		}
		require.Equal(t, "a dependency of the orchestrator is unavailable; retry later", resp.Results[0].Error.Message,
			"no internals in the message")
	})
}

// TestSubmitBatchAdmission: admission control decides on each job, in order; a refused job
// carries its retry_after_ms and the answer the longest as Retry-After.
func TestSubmitBatchAdmission(t *testing.T) {
	t.Parallel()
	b, _ := setupAdmission(t, nil)
	rec := b.request(t, http.MethodPut, "/control/admission", "admin",
		wire.AdmissionPolicyUpdate{Agent: "alice", RatePerSec: ptr(0.01), Burst: ptr(2)})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	t.Run("RateLimited", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/jobs/submit_batch", "alice", wire.SubmitBatchRequest{Jobs: []wire.SubmitRequest{
			admSubmit("a-1", "noop", ""), admSubmit("a-2", "noop", ""), admSubmit("a-3", "noop", ""), admSubmit("", "noop", ""),
		}})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		resp := decode[wire.SubmitBatchResponse](t, rec)
		require.Len(t, resp.Results, 4)
		require.Equal(t, wire.SubmitBatchResult{JobID: "a-1", Status: "pending", Created: true}, resp.Results[0])
		require.Equal(t, wire.SubmitBatchResult{JobID: "a-2", Status: "pending", Created: true}, resp.Results[1])
		for _, i := range []int{2, 3} {
			r := resp.Results[i]
			require.NotNil(t, r.Error, "result %d: %+v", i, r)
			require.Equal(t, wire.CodeRateLimited, r.Error.Code)
			require.Contains(t, r.Error.Message, "alice")
			require.InDelta(t, 100_000, r.RetryAfterMS, 1_000, "0.01 per second: one every 100 s")
			require.False(t, r.Created)
			require.Empty(t, r.Status)
		}
		require.Equal(t, "a-3", resp.Results[2].JobID)
		require.Empty(t, resp.Results[3].JobID, "no id was sent, none written")
		require.Equal(t, 2, resp.Created)
		require.Equal(t, 2, resp.Failed)
		retry, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		require.NoError(t, err)
		require.InDelta(t, 100, retry, 1)
		require.Len(t, b.allJobs(t, "alice"), 2, "nothing written for the refused jobs")

		// A refused repeat of an existing id is answered with the job, as the single submit's.
		rec = b.request(t, http.MethodPost, "/jobs/submit_batch", "alice", wire.SubmitBatchRequest{Jobs: []wire.SubmitRequest{
			admSubmit("a-1", "noop", ""), admSubmit("a-4", "noop", ""),
		}})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		resp = decode[wire.SubmitBatchResponse](t, rec)
		require.Equal(t, wire.SubmitBatchResult{JobID: "a-1", Status: "pending"}, resp.Results[0])
		require.Equal(t, wire.CodeRateLimited, resp.Results[1].Error.Code)
		require.NotEmpty(t, rec.Header().Get("Retry-After"))
		require.Len(t, b.allJobs(t, "alice"), 2)
	})

	t.Run("RoutedToCPUFallback", func(t *testing.T) {
		t.Parallel()
		resp := b.submitBatch(t, "bob", wire.SubmitBatchRequest{Jobs: []wire.SubmitRequest{
			admSubmit("r-1", "infer", ""), admSubmit("r-2", "infer", ""),
		}}, 2)
		require.Equal(t, wire.SubmitBatchResult{JobID: "r-1", Status: "pending", Created: true}, resp.Results[0])
		require.Equal(t, wire.SubmitBatchResult{JobID: "r-2", Status: "pending", Created: true, Type: "infer_cpu", RoutedFrom: "infer"},
			resp.Results[1], "the queue of 1 is full after the first job of the batch")
		job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/r-2", "bob", nil))
		require.Equal(t, "infer_cpu", job.Type)
	})
}

// TestSubmitBatchMaxPending: the jobs of one batch count against the agent's max_pending one by
// one, not each against the jobs written before the batch.
func TestSubmitBatchMaxPending(t *testing.T) {
	t.Parallel()
	b, _ := setupAdmission(t, nil)
	rec := b.request(t, http.MethodPut, "/control/admission", "admin",
		wire.AdmissionPolicyUpdate{Agent: "bob", RatePerSec: ptr(1e6), Burst: ptr(1000), MaxPending: ptr(3)})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	batch := func(prefix string) wire.SubmitBatchResponse {
		t.Helper()
		jobs := make([]wire.SubmitRequest, 5)
		for i := range jobs {
			jobs[i] = admSubmit(fmt.Sprintf("%s-%d", prefix, i), "noop", "")
		}
		rec := b.request(t, http.MethodPost, "/jobs/submit_batch", "bob", wire.SubmitBatchRequest{Jobs: jobs})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return decode[wire.SubmitBatchResponse](t, rec)
	}
	resp := batch("m")
	require.Equal(t, 3, resp.Created)
	require.Equal(t, 2, resp.Failed)
	for i, r := range resp.Results {
		if i < 3 {
			require.Nil(t, r.Error, "result %d", i)
			continue
		}
		require.NotNil(t, r.Error, "result %d", i)
		require.Equal(t, wire.CodeMaxPending, r.Error.Code)
		require.Contains(t, r.Error.Message, "bob")
	}
	require.Len(t, b.allJobs(t, "bob"), 3)

	// With three unfinished jobs written, the next batch gets none in.
	resp = batch("n")
	require.Zero(t, resp.Created)
	require.Equal(t, 5, resp.Failed)
	require.Len(t, b.allJobs(t, "bob"), 3)
}

// readWatch is a request body that records whether the handler began to read it.
type readWatch struct {
	r    io.Reader
	read atomic.Bool
}

func (w *readWatch) Read(p []byte) (int, error) {
	w.read.Store(true)
	return w.r.Read(p)
}

// TestSubmitBatchTurns: past submit_batch_concurrency large batches in progress, a large batch
// waits for a turn before its body is read, and is refused with a 503 and Retry-After when the
// wait is too long. A batch no larger than one submit may be takes no turn.
func TestSubmitBatchTurns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slots := b.srv.batchSlots
	require.Equal(t, config.SubmitBatchConcurrencyDefault, cap(slots))
	for range cap(slots) {
		slots <- struct{}{} // every turn taken, as by batches in progress
	}

	// Three small jobs: a body smaller than one submit may be.
	b.submitBatch(t, "admin", batchOf(3, "small", "small"), 3)

	// Twenty jobs of nearly max_payload_bytes each: a body larger than one submit may be.
	pad := strings.Repeat("x", testMaxPayload-100)
	post := func(agent string) (*readWatch, *http.Request) {
		batch := batchOf(20, agent, agent)
		for i := range batch.Jobs {
			batch.Jobs[i].Payload = json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad))
		}
		raw, err := json.Marshal(batch)
		require.NoError(t, err)
		require.Greater(t, int64(len(raw)), int64(testMaxPayload+submitEnvelopeBytes))
		body := &readWatch{r: bytes.NewReader(raw)}
		req := httptest.NewRequest(http.MethodPost, "/jobs/submit_batch", body)
		req.Header.Set("Authorization", "Bearer "+b.tokens["admin"])
		req.Header.Set("Content-Type", "application/json")
		return body, req
	}

	body, req := post("waits")
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		b.srv.Handler().ServeHTTP(rec, req)
		done <- rec
	}()
	require.Never(t, body.read.Load, 300*time.Millisecond, 10*time.Millisecond, "a batch without a turn is not read")
	<-slots // a batch in progress ends
	var rec *httptest.ResponseRecorder
	select {
	case rec = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting batch did not take the freed turn")
	}
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, 20, decode[wire.SubmitBatchResponse](t, rec).Created)
	require.Len(t, slots, cap(slots)-1, "the batch gave its turn back")

	slots <- struct{}{}
	b.srv.batchWait = 50 * time.Millisecond
	body, req = post("late")
	rec = httptest.NewRecorder()
	b.srv.Handler().ServeHTTP(rec, req)
	d := requireError(t, rec, http.StatusServiceUnavailable, CodeUnavailable, "")
	require.Contains(t, d.Message, "batch submits are in progress")
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.False(t, body.read.Load(), "a refused batch is not read")
	require.Zero(t, b.countJobs(t, "late"))
	require.Len(t, slots, cap(slots), "a refused batch holds no turn")
}

// TestSubmitBatchReturnsMemory: once no batch has run for batchIdle, the memory of the burst
// is given back to the system, once per burst, and not while a batch is in progress.
func TestSubmitBatchReturnsMemory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var freed atomic.Int32
	b.srv.batchIdle, b.srv.freeMemory = 100*time.Millisecond, func() { freed.Add(1) }

	b.submitBatch(t, "admin", batchOf(2, "mem-a", "mem"), 2)
	b.submitBatch(t, "admin", batchOf(2, "mem-b", "mem"), 2)
	require.Eventually(t, func() bool { return freed.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Never(t, func() bool { return freed.Load() > 1 }, 300*time.Millisecond, 20*time.Millisecond, "once per burst")

	b.srv.batchesActive.Add(2) // two batches in progress
	b.srv.afterBatch()         // one ends
	require.Never(t, func() bool { return freed.Load() > 1 }, 300*time.Millisecond, 20*time.Millisecond,
		"nothing is returned while a batch is in progress")
	b.srv.afterBatch() // the other ends too
	require.Eventually(t, func() bool { return freed.Load() == 2 }, 5*time.Second, 10*time.Millisecond)
}
