package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// post sends body (a string as is, anything else as JSON) with a bearer token over real HTTP.
func post(t *testing.T, url, token string, body any) (int, []byte) {
	t.Helper()
	raw, ok := body.(string)
	if !ok {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		raw = string(b)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(raw)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// readEntry reads the next entry of stream as consumer, as a worker's reader does, and checks
// that it names job.
func readEntry(t *testing.T, sc *streams.Client, stream, typ, consumer, job string) string {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, sc.EnsureGroup(ctx, stream, streams.GroupName(typ)))
	ds, err := sc.Read(ctx, streams.ReadParams{Group: streams.GroupName(typ), Consumer: consumer,
		Streams: []string{stream}, Count: 1, Block: 5 * time.Second})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, job, ds[0].JobID)
	return ds[0].ID
}

// TestClaimNeedsADeliveredEntry: a worker token cannot claim a pending job by id with an
// invented entry, and the refused claim leaves the job's row (its stream_id above all) as it
// was; the entry Redis delivered to the worker claims it.
func TestClaimNeedsADeliveredEntry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(b.srv.Handler())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	id := b.submitJob(t, "alice")
	b.eng.FlushMarks(ctx)
	before, err := b.st.JobGet(ctx, id)
	require.NoError(t, err)
	require.NotEmpty(t, before.StreamID)

	for _, fake := range []string{
		`{"worker_id":"w1","jobs":[{"job_id":"` + id + `","stream":"noop","message_id":"1-0"}]}`,
		`{"worker_id":"w1","jobs":[{"job_id":"` + id + `","stream":"noop","message_id":""}]}`,
		`{"worker_id":"w1","jobs":[{"job_id":"` + id + `","stream":"inference_jobs","message_id":"1-0"}]}`,
	} {
		for _, who := range []string{"worker", "admin"} {
			status, body := post(t, srv.URL+"/internal/jobs/claim", b.tokens[who], fake)
			require.Equal(t, http.StatusOK, status, string(body))
			var res wire.ClaimResponse
			require.NoError(t, json.Unmarshal(body, &res))
			require.Empty(t, res.Claimed, "%s: %s", who, fake)
			require.Equal(t, []wire.ClaimRefusal{{JobID: id, Reason: wire.ReasonNotDelivered}}, res.Refused)
			after, err := b.st.JobGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.JobPending, after.Status)
			require.Equal(t, before.StreamID, after.StreamID, "the job's stream_id is not overwritten")
			require.Zero(t, after.Attempts)
			require.Empty(t, after.WorkerID)
		}
	}

	// The worker that read the entry claims it.
	entry := readEntry(t, b.sc, "noop", "noop", "w1", id)
	status, body := post(t, srv.URL+"/internal/jobs/claim", b.tokens["worker"], wire.ClaimRequest{
		WorkerID: "w1", Jobs: []wire.ClaimItem{{JobID: id, Stream: "noop", MessageID: entry}}})
	require.Equal(t, http.StatusOK, status, string(body))
	var res wire.ClaimResponse
	require.NoError(t, json.Unmarshal(body, &res))
	require.Len(t, res.Claimed, 1, string(body))
}

// TestScopedWorkerToken: a worker token scoped to types and a pool claims and registers only
// within them; the refusals name what is out of scope. An unscoped worker token keeps its reach.
func TestScopedWorkerTokenEnforced(t *testing.T) {
	t.Parallel()
	b, _ := setupPools(t)
	srv := httptest.NewServer(b.srv.Handler())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	scoped, line, err := NewToken(TokenRecord{Role: RoleWorker, Types: []string{"sleep"}, Pool: "pool-p"})
	require.NoError(t, err)
	extra, err := LoadTokens("", line)
	require.NoError(t, err)
	b.srv.SetTokens(editTokens(b.srv.tokens.Load(), func(m map[string]TokenRecord) {
		rec, _ := extra.Lookup(scoped)
		m[rec.Hash] = rec
	}))
	for _, p := range []string{"pool-p", "pool-q"} {
		req := mistral
		req.PoolID, req.Types = p, []string{"noop", "sleep"}
		status, body := post(t, srv.URL+"/workers/pool", b.tokens["admin"], req)
		require.Equal(t, http.StatusCreated, status, string(body))
	}
	errorOf := func(status int, body []byte) wire.ErrorDetail {
		t.Helper()
		require.Equal(t, http.StatusForbidden, status, string(body))
		var eb wire.ErrorBody
		require.NoError(t, json.Unmarshal(body, &eb))
		require.Equal(t, CodeForbidden, eb.Error.Code)
		return eb.Error
	}

	t.Run("Register", func(t *testing.T) {
		reg := func(pool string, types ...string) (int, []byte) {
			return post(t, srv.URL+"/internal/workers/register", scoped, wire.RegisterWorkerRequest{
				WorkerID: "ws-" + pool, PoolID: pool, Types: types, Concurrency: 1})
		}
		e := errorOf(reg("pool-q", "sleep"))
		require.Equal(t, "pool_id", e.Field)
		require.Contains(t, e.Message, `"pool-p"`)
		e = errorOf(reg("pool-p", "noop", "sleep"))
		require.Equal(t, "types", e.Field)
		require.Contains(t, e.Message, "noop")
		e = errorOf(reg("pool-p"))
		require.Equal(t, "types", e.Field)
		status, body := reg("pool-p", "sleep")
		require.Equal(t, http.StatusOK, status, string(body))
		// The unscoped worker token registers anywhere, as before.
		status, body = post(t, srv.URL+"/internal/workers/register", b.tokens["worker"], wire.RegisterWorkerRequest{
			WorkerID: "wu", PoolID: "pool-q", Types: []string{"noop"}, Concurrency: 1})
		require.Equal(t, http.StatusOK, status, string(body))
	})

	t.Run("HeartbeatAndDeregister", func(t *testing.T) {
		// Only workers the scope could have registered: "wu" is of pool-q.
		hb := func(id string) (int, []byte) {
			return post(t, srv.URL+"/internal/workers/"+id+"/heartbeat", scoped, wire.WorkerHeartbeatRequest{Status: "idle"})
		}
		e := errorOf(hb("wu"))
		require.Equal(t, "pool_id", e.Field)
		status, body := hb("ws-pool-p")
		require.Equal(t, http.StatusOK, status, string(body))
		e = errorOf(post(t, srv.URL+"/internal/workers/wu/deregister", scoped, struct{}{}))
		require.Equal(t, "pool_id", e.Field)
		w, err := b.st.WorkerGet(ctx, "wu", false)
		require.NoError(t, err, "a refused deregistration leaves the worker")
		require.Equal(t, "pool-q", w.PoolID)
		status, body = post(t, srv.URL+"/internal/workers/nobody/deregister", scoped, struct{}{})
		require.Equal(t, http.StatusNoContent, status, string(body))
	})

	t.Run("Claim", func(t *testing.T) {
		noopJob := b.submitJob(t, "alice")
		entry := readEntry(t, b.sc, "noop", "noop", "ws", noopJob)
		claim := func(pool, stream string) (int, []byte) {
			return post(t, srv.URL+"/internal/jobs/claim", scoped, wire.ClaimRequest{WorkerID: "ws", PoolID: pool,
				Jobs: []wire.ClaimItem{{JobID: noopJob, Stream: stream, MessageID: entry}}})
		}
		e := errorOf(claim("pool-p", "noop"))
		require.Equal(t, "jobs[0].stream", e.Field)
		require.Contains(t, e.Message, "sleep")
		// A node stream (the scheduler's, streams.NodeStream) is its type's.
		e = errorOf(claim("pool-p", streams.NodeStream("noop", "node-1")))
		require.Equal(t, "jobs[0].stream", e.Field)
		status, body := claim("pool-p", streams.NodeStream("sleep", "node-1"))
		require.Equal(t, http.StatusOK, status, string(body))
		e = errorOf(claim("pool-q", "sleep"))
		require.Equal(t, "pool_id", e.Field)
		e = errorOf(claim("", "sleep"))
		require.Equal(t, "pool_id", e.Field)
		// An item that lies about its stream reaches the engine, which checks the job's type.
		status, body = claim("pool-p", "sleep")
		require.Equal(t, http.StatusOK, status, string(body))
		var res wire.ClaimResponse
		require.NoError(t, json.Unmarshal(body, &res))
		require.Empty(t, res.Claimed)
		require.Equal(t, []wire.ClaimRefusal{{JobID: noopJob, Reason: wire.ReasonOutOfScope}}, res.Refused)
		job, err := b.st.JobGet(ctx, noopJob)
		require.NoError(t, err)
		require.Equal(t, store.JobPending, job.Status)

		// A job of its type, read by it, in its pool: claimed.
		sleepJob, _, err := b.eng.Submit(ctx, engine.SubmitParams{Type: "sleep", Agent: "alice",
			Payload: json.RawMessage(`{"ms":1}`), Actor: "agent:alice"})
		require.NoError(t, err)
		sleepEntry := readEntry(t, b.sc, "sleep", "sleep", "ws", sleepJob.ID)
		status, body = post(t, srv.URL+"/internal/jobs/claim", scoped, wire.ClaimRequest{WorkerID: "ws", PoolID: "pool-p",
			Jobs: []wire.ClaimItem{{JobID: sleepJob.ID, Stream: "sleep", MessageID: sleepEntry}}})
		require.Equal(t, http.StatusOK, status, string(body))
		require.NoError(t, json.Unmarshal(body, &res))
		require.Len(t, res.Claimed, 1, string(body))

		// The unscoped worker token claims the noop job (its recorded entry), as before.
		status, body = post(t, srv.URL+"/internal/jobs/claim", b.tokens["worker"], wire.ClaimRequest{WorkerID: "wu",
			Jobs: []wire.ClaimItem{{JobID: noopJob, Stream: "noop", MessageID: b.entryOf(t, noopJob)}}})
		require.Equal(t, http.StatusOK, status, string(body))
		require.NoError(t, json.Unmarshal(body, &res))
		require.Len(t, res.Claimed, 1, string(body))
	})
}
