package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/wire"
)

// entryOf returns the job's recorded stream entry, once its submit's mark has landed: a claim
// naming it is proven without Redis (engine.ClaimParams.CheckEntries).
func (b *bundle) entryOf(t *testing.T, id string) string {
	t.Helper()
	b.eng.FlushMarks(context.Background())
	job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+id, "admin", nil))
	require.NotEmpty(t, job.StreamID, "job %s is published and marked", id)
	return job.StreamID
}

// claimOne claims a job over HTTP as worker w1 and returns what the worker runs.
func (b *bundle) claimOne(t *testing.T, id string) wire.ClaimedJob {
	t.Helper()
	rec := b.request(t, http.MethodPost, "/internal/jobs/claim", "worker", wire.ClaimRequest{
		WorkerID: "w1", PoolID: "pool-a", NodeID: "node-1",
		Jobs: []wire.ClaimItem{{JobID: id, Stream: "noop", MessageID: b.entryOf(t, id)}},
	})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	res := decode[wire.ClaimResponse](t, rec)
	require.Empty(t, res.Refused)
	require.Len(t, res.Claimed, 1)
	return res.Claimed[0]
}

func TestWorkerRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("Done", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", `{"type":"noop","payload":{"x":1},"timeout":60}`)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		id := decode[wire.SubmitResponse](t, rec).JobID

		claimed := b.claimOne(t, id)
		require.Equal(t, id, claimed.JobID)
		require.Equal(t, "noop", claimed.Type)
		require.Equal(t, 1, claimed.Attempt)
		require.Equal(t, wire.Duration(60e9), claimed.Timeout)
		require.JSONEq(t, `{"x":1}`, string(claimed.Payload))

		// Claiming again is refused: the job is no longer pending.
		rec = b.request(t, http.MethodPost, "/internal/jobs/claim", "worker",
			wire.ClaimRequest{WorkerID: "w2", Jobs: []wire.ClaimItem{{JobID: id}, {JobID: "ghost"}}})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		again := decode[wire.ClaimResponse](t, rec)
		require.Empty(t, again.Claimed)
		require.NotNil(t, again.Claimed, "[] not null")
		require.ElementsMatch(t, []wire.ClaimRefusal{
			{JobID: id, Reason: wire.ReasonNotPending}, {JobID: "ghost", Reason: wire.ReasonNotFound},
		}, again.Refused)

		rec = b.request(t, http.MethodPost, "/internal/jobs/start", "worker", wire.StartRequest{WorkerID: "w1", JobIDs: []string{id}})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Empty(t, decode[wire.StartResponse](t, rec).Cancel)
		require.Equal(t, "running", decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+id, "alice", nil)).Status)

		rec = b.request(t, http.MethodPost, "/internal/jobs/complete", "worker", wire.CompleteRequest{
			WorkerID: "w1",
			Results: []wire.JobResult{{JobID: id, Attempt: claimed.Attempt, LeaseToken: claimed.LeaseToken,
				Status: wire.ResultDone, Result: []byte(`{"ok":true}`)}},
		})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, []wire.CompleteOutcome{{JobID: id, Outcome: wire.OutcomeDone, Status: "done"}},
			decode[wire.CompleteResponse](t, rec).Outcomes)

		job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+id, "alice", nil))
		require.Equal(t, "done", job.Status)
		require.JSONEq(t, `{"ok":true}`, string(job.Result))
		require.NotNil(t, job.StartedAt)
		require.NotNil(t, job.FinishedAt)
		require.Equal(t, "w1", job.WorkerID)

		// A terminal job cannot be cancelled.
		requireError(t, b.request(t, http.MethodPost, "/jobs/"+id+"/cancel", "alice", nil), http.StatusConflict, CodeJobTerminal, "")
	})
	t.Run("FailedIsRetried", func(t *testing.T) {
		t.Parallel()
		id := b.submitJob(t, "alice")
		claimed := b.claimOne(t, id)
		rec := b.request(t, http.MethodPost, "/internal/jobs/complete", "admin", wire.CompleteRequest{
			WorkerID: "w1",
			Results: []wire.JobResult{{JobID: id, Attempt: claimed.Attempt, LeaseToken: claimed.LeaseToken,
				Status: wire.ResultFailed, Error: "CUDA out of memory"}},
		})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, []wire.CompleteOutcome{{JobID: id, Outcome: wire.OutcomeRetry, Status: "pending"}},
			decode[wire.CompleteResponse](t, rec).Outcomes)
		job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+id, "alice", nil))
		require.Equal(t, "CUDA out of memory", job.LastError)
		require.Equal(t, 1, job.Attempts)
	})
	t.Run("CancelReachesWorker", func(t *testing.T) {
		t.Parallel()
		id := b.submitJob(t, "alice")
		claimed := b.claimOne(t, id)
		rec := b.request(t, http.MethodPost, "/jobs/"+id+"/cancel", "alice", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

		rec = b.request(t, http.MethodPost, "/internal/jobs/start", "worker", wire.StartRequest{WorkerID: "w1", JobIDs: []string{id}})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, []string{id}, decode[wire.StartResponse](t, rec).Cancel)

		rec = b.request(t, http.MethodPost, "/internal/jobs/complete", "worker", wire.CompleteRequest{
			WorkerID: "w1",
			Results:  []wire.JobResult{{JobID: id, Attempt: claimed.Attempt, Status: wire.ResultDone}},
		})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, []wire.CompleteOutcome{{JobID: id, Outcome: wire.OutcomeStale, Status: "cancelled"}},
			decode[wire.CompleteResponse](t, rec).Outcomes)
	})
}

// TestClaimWithResults is a worker's round in one call: what ended is recorded, what is next is
// claimed.
func TestClaimWithResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done, expired, next := b.submitJob(t, "alice"), b.submitJob(t, "alice"), b.submitJob(t, "alice")
	first := b.claimOne(t, done)
	stale := b.claimOne(t, expired)

	rec := b.request(t, http.MethodPost, "/internal/jobs/claim", "worker", wire.ClaimRequest{
		WorkerID: "w1", PoolID: "pool-a", NodeID: "node-1",
		Jobs: []wire.ClaimItem{{JobID: next, Stream: "noop", MessageID: b.entryOf(t, next)}},
		Results: []wire.JobResult{
			{JobID: done, Attempt: first.Attempt, LeaseToken: first.LeaseToken, Status: wire.ResultDone, Result: []byte(`{"n":1}`)},
			// Another attempt's lease: the result is stale, and the claim still stands.
			{JobID: expired, Attempt: stale.Attempt + 1, LeaseToken: stale.LeaseToken, Status: wire.ResultDone},
		},
	})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	res := decode[wire.ClaimResponse](t, rec)
	require.Equal(t, []wire.CompleteOutcome{
		{JobID: done, Outcome: wire.OutcomeDone, Status: "done"},
		{JobID: expired, Outcome: wire.OutcomeStale, Status: "claimed"},
	}, res.Outcomes)
	require.Len(t, res.Claimed, 1)
	require.Equal(t, next, res.Claimed[0].JobID)
	job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+done, "alice", nil))
	require.Equal(t, "done", job.Status)
	require.JSONEq(t, `{"n":1}`, string(job.Result))

	// A claim without results answers no outcomes.
	rec = b.request(t, http.MethodPost, "/internal/jobs/claim", "worker", `{"worker_id":"w1","jobs":[]}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.NotContains(t, rec.Body.String(), "outcomes")
}

func TestWorkerBadInput(t *testing.T) {
	t.Parallel()
	b := setupDown(t)
	ids := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`"j%d"`, i)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	items := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`{"job_id":"j%d"}`, i)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	cases := []struct{ name, path, body, field string }{
		{"ClaimNoWorker", "claim", `{"jobs":[]}`, "worker_id"},
		{"ClaimBadWorker", "claim", `{"worker_id":"w 1","jobs":[]}`, "worker_id"},
		{"ClaimLongWorker", "claim", `{"worker_id":"` + strings.Repeat("w", 129) + `","jobs":[]}`, "worker_id"},
		{"ClaimBadPool", "claim", `{"worker_id":"w1","pool_id":"p/1","jobs":[]}`, "pool_id"},
		{"ClaimTooMany", "claim", `{"worker_id":"w1","jobs":` + items(MaxItemsPerCall+1) + `}`, "jobs"},
		{"ClaimBadJobID", "claim", `{"worker_id":"w1","jobs":[{"job_id":"ok"},{"job_id":""}]}`, "jobs[1].job_id"},
		{"ClaimBadMessageID", "claim", `{"worker_id":"w1","jobs":[{"job_id":"ok","message_id":"1 2"}]}`, "jobs[0].message_id"},
		{"ClaimBadInFlight", "claim", `{"worker_id":"w1","jobs":[],"in_flight":["a","b c"]}`, "in_flight[1]"},
		{"ClaimUnknownField", "claim", `{"worker_id":"w1","jobs":[],"lease":1}`, "lease"},
		{"ClaimBadResultStatus", "claim", `{"worker_id":"w1","jobs":[],"results":[{"job_id":"a","status":"ok"}]}`, "results[0].status"},
		{"ClaimBadResultJobID", "claim", `{"worker_id":"w1","jobs":[],"results":[{"job_id":"a b","status":"done"}]}`, "results[0].job_id"},
		{"StartNoWorker", "start", `{"job_ids":["a"]}`, "worker_id"},
		{"StartTooMany", "start", `{"worker_id":"w1","job_ids":` + ids(MaxItemsPerCall+1) + `}`, "job_ids"},
		{"StartBadJobID", "start", `{"worker_id":"w1","job_ids":["a","%"]}`, "job_ids[1]"},
		{"CompleteNoWorker", "complete", `{"results":[]}`, "worker_id"},
		{"CompleteBadStatus", "complete", `{"worker_id":"w1","results":[{"job_id":"a","status":"ok"}]}`, "results[0].status"},
		{"CompleteNoStatus", "complete", `{"worker_id":"w1","results":[{"job_id":"a"}]}`, "results[0].status"},
		{"CompleteBadJobID", "complete", `{"worker_id":"w1","results":[{"job_id":"","status":"done"}]}`, "results[0].job_id"},
		{"CompleteNegativeAttempt", "complete", `{"worker_id":"w1","results":[{"job_id":"a","status":"done","attempt":-1}]}`, "results[0].attempt"},
		{"CompleteNegativeElapsed", "complete", `{"worker_id":"w1","results":[{"job_id":"a","status":"done","elapsed_us":-1}]}`, "results[0].elapsed_us"},
		{"CompleteHugeElapsed", "complete", `{"worker_id":"w1","results":[{"job_id":"a","status":"done","elapsed_us":999999999999999}]}`, "results[0].elapsed_us"},
		{"CompleteTooManyInFlight", "complete", `{"worker_id":"w1","results":[],"in_flight":` + ids(MaxItemsPerCall+1) + `}`, "in_flight"},
		{"CompleteTrailingData", "complete", `{"worker_id":"w1","results":[]} {}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rec := b.request(t, http.MethodPost, "/internal/jobs/"+c.path, "worker", c.body)
			requireError(t, rec, http.StatusBadRequest, CodeInvalidRequest, c.field)
		})
	}
	t.Run("IDMessagesSayTheRule", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct{ body, field, want string }{
			{`{"worker_id":"..","jobs":[]}`, "worker_id", ident.ID.Rule()},
			{`{"worker_id":"w1","node_id":".","jobs":[]}`, "node_id", ident.ID.Rule()},
			{`{"worker_id":"w1","jobs":[{"job_id":".."}]}`, "jobs[0].job_id", engine.JobIDPattern.Rule()},
			{`{"worker_id":"w1","jobs":[{"job_id":"a","stream":"s t"}]}`, "jobs[0].stream",
				streamRefPattern.Rule() + ", with at most one @ before a pool id"},
			{`{"worker_id":"w1","jobs":[{"job_id":"a","stream":"s:n@p@q"}]}`, "jobs[0].stream",
				streamRefPattern.Rule() + ", with at most one @ before a pool id"},
		} {
			e := requireError(t, b.request(t, http.MethodPost, "/internal/jobs/claim", "worker", c.body),
				http.StatusBadRequest, CodeInvalidRequest, c.field)
			require.Equal(t, "must be "+c.want, e.Message)
			require.Contains(t, e.Message, "not . or ..")
		}
	})
	t.Run("AtTheLimitReachesTheEngine", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/internal/jobs/start", "worker", `{"worker_id":"w1","job_ids":`+ids(MaxItemsPerCall)+`}`)
		requireError(t, rec, http.StatusServiceUnavailable, CodeUnavailable, "")
	})
}
