package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/wire"
)

// deadLetter submits a job for agent, claims it and fails it for good; with publish, the DLQ
// relay puts it on the dead-letter stream.
func (b *bundle) deadLetter(t *testing.T, agent string, publish bool) string {
	t.Helper()
	ctx := context.Background()
	id := b.submitJob(t, agent)
	c, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", Items: []engine.ClaimItem{{JobID: id, Stream: "noop"}}})
	require.NoError(t, err)
	require.Len(t, c.Claimed, 1)
	res, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{{
		JobID: id, Attempt: 1, LeaseToken: c.Leases[id].Token, Error: "model exploded", NonRetryable: true,
	}}})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeDeadLetter, res.Outcomes[0].Outcome)
	if publish {
		_, _, err := b.eng.RelayDeadLetters(ctx, nil, 100)
		require.NoError(t, err)
	}
	return id
}

func TestDLQ(t *testing.T) {
	t.Parallel()

	t.Run("AdminOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, r := range []struct{ method, path string }{
			{http.MethodGet, "/dlq"}, {http.MethodPost, "/dlq/j1/replay"}, {http.MethodDelete, "/dlq/j1"},
		} {
			requireError(t, b.request(t, r.method, r.path, "alice", nil), http.StatusForbidden, CodeForbidden, "")
			requireError(t, b.request(t, r.method, r.path, "worker", nil), http.StatusForbidden, CodeForbidden, "")
			requireError(t, b.request(t, r.method, r.path, "", nil), http.StatusUnauthorized, CodeUnauthorized, "")
		}
	})

	t.Run("ListPages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.deadLetter(t, "alice", true)
		second := b.deadLetter(t, "bob", false) // not on the stream yet
		b.submitJob(t, "alice")                 // live: not listed

		rec := b.request(t, http.MethodGet, "/dlq?limit=1", "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		page := decode[wire.DeadLetterList](t, rec)
		require.Len(t, page.DeadLetters, 1)
		require.Equal(t, second, page.DeadLetters[0].JobID, "newest first")
		require.Empty(t, page.DeadLetters[0].StreamID, "not published to the DLQ stream yet")
		require.NotEmpty(t, page.NextCursor)

		rec = b.request(t, http.MethodGet, "/dlq?limit=1&cursor="+page.NextCursor, "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		page = decode[wire.DeadLetterList](t, rec)
		require.Len(t, page.DeadLetters, 1)
		require.Empty(t, page.NextCursor)
		d := page.DeadLetters[0]
		require.Equal(t, first, d.JobID)
		require.Equal(t, "noop", d.Type)
		require.Equal(t, "alice", d.Agent)
		require.Equal(t, "noop", d.OriginStream)
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, "model exploded", d.LastError)
		require.NotEmpty(t, d.StreamID)
		require.NotNil(t, d.DeadLetteredAt)

		rec = b.request(t, http.MethodGet, "/dlq?type=inference", "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Empty(t, decode[wire.DeadLetterList](t, rec).DeadLetters)

		requireError(t, b.request(t, http.MethodGet, "/dlq?limit=0", "admin", nil), http.StatusBadRequest, CodeInvalidRequest, "limit")
		requireError(t, b.request(t, http.MethodGet, "/dlq?cursor=***", "admin", nil), http.StatusBadRequest, CodeInvalidRequest, "cursor")
	})

	t.Run("ReplayAndPurge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		replayed, purged := b.deadLetter(t, "alice", true), b.deadLetter(t, "alice", true)

		rec := b.request(t, http.MethodPost, "/dlq/"+replayed+"/replay", "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		job := decode[wire.Job](t, rec)
		require.Equal(t, "pending", job.Status)
		require.Equal(t, 1, job.Attempts)
		require.Equal(t, 1+b.cfg.JobTypes["noop"].MaxAttempts, job.MaxAttempts)
		requireError(t, b.request(t, http.MethodPost, "/dlq/"+replayed+"/replay", "admin", nil),
			http.StatusConflict, CodeNotDeadLetter, "")

		rec = b.request(t, http.MethodDelete, "/dlq/"+purged, "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, "dead_letter", decode[wire.Job](t, rec).Status, "the job stays dead_letter")
		requireError(t, b.request(t, http.MethodDelete, "/dlq/"+purged, "admin", nil), http.StatusConflict, CodeNotDeadLetter, "")
		requireError(t, b.request(t, http.MethodPost, "/dlq/"+purged+"/replay", "admin", nil), http.StatusConflict, CodeNotDeadLetter, "")

		rec = b.request(t, http.MethodGet, "/dlq", "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Empty(t, decode[wire.DeadLetterList](t, rec).DeadLetters, "neither is in the queue now")
		n, err := b.sc.Len(context.Background(), "dlq")
		require.NoError(t, err)
		require.Zero(t, n, "their entries are deleted from the DLQ stream")

		requireError(t, b.request(t, http.MethodPost, "/dlq/nope/replay", "admin", nil), http.StatusNotFound, CodeNotFound, "")
		requireError(t, b.request(t, http.MethodDelete, "/dlq/n%C3%B6", "admin", nil), http.StatusNotFound, CodeNotFound, "")
	})

	t.Run("Client", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		srv := httptest.NewServer(b.srv.Handler())
		t.Cleanup(srv.Close)
		ctx := context.Background()
		c := client.New(srv.URL, b.tokens["admin"])
		a, z := b.deadLetter(t, "alice", true), b.deadLetter(t, "bob", true)

		list, err := c.ListDeadLetters(ctx, client.ListDeadLettersParams{Type: "noop", Limit: 10})
		require.NoError(t, err)
		require.Len(t, list.DeadLetters, 2)

		job, err := c.ReplayDeadLetter(ctx, a)
		require.NoError(t, err)
		require.Equal(t, "pending", job.Status)
		job, err = c.PurgeDeadLetter(ctx, z)
		require.NoError(t, err)
		require.Equal(t, "dead_letter", job.Status)
		_, err = c.PurgeDeadLetter(ctx, z)
		require.True(t, client.IsStatus(err, http.StatusConflict), "%v", err)

		list, err = c.ListDeadLetters(ctx, client.ListDeadLettersParams{})
		require.NoError(t, err)
		require.Empty(t, list.DeadLetters)

		_, err = client.New(srv.URL, b.tokens["alice"]).ListDeadLetters(ctx, client.ListDeadLettersParams{})
		require.True(t, client.IsStatus(err, http.StatusForbidden), "%v", err)
	})
}
