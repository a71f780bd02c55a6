package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/wire"
)

// editTokens returns a copy of set with edit applied to its records by hash (delete one to
// revoke its token).
func editTokens(set *Tokens, edit func(byHash map[string]TokenRecord)) *Tokens {
	out := &Tokens{byHash: maps.Clone(set.byHash)}
	edit(out.byHash)
	for _, rec := range out.byHash {
		out.scoped = out.scoped || rec.Scoped()
	}
	return out
}

// requireFeedEnds reads ch until the server ends the stream and returns the last event. The
// deadline is generous: what is asserted is that the stream ends, not how fast this machine is.
func requireFeedEnds(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	deadline := time.After(30 * time.Second)
	var last sseEvent
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return last
			}
			last = ev
		case <-deadline:
			t.Fatal("the stream did not end within 30s of the reload")
		}
	}
}

// TestEventStreamsEndOnReload: a reload of the tokens (SetTokens, what SIGHUP does) that
// revokes a token, or changes what it speaks for, ends the streams it holds open; the streams
// of other tokens go on.
func TestEventStreamsEndOnReload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(b.srv.Handler())
	t.Cleanup(srv.Close)
	ctx := t.Context()
	aliceHash, adminHash := HashToken(b.tokens["alice"]), HashToken(b.tokens["admin"])

	aliceJob, bobJob := b.submitJob(t, "alice"), b.submitJob(t, "bob")
	aliceFeed, status := openFeed(t, ctx, srv.URL+"/jobs/"+aliceJob+"/events", b.tokens["alice"], 0)
	require.Equal(t, http.StatusOK, status)
	until(t, aliceFeed, engine.EventSubmitted)
	bobFeed, status := openFeed(t, ctx, srv.URL+"/jobs/"+bobJob+"/events", b.tokens["bob"], 0)
	require.Equal(t, http.StatusOK, status)
	until(t, bobFeed, engine.EventSubmitted)
	adminFeed, status := openFeed(t, ctx, srv.URL+"/events", b.tokens["admin"], 0)
	require.Equal(t, http.StatusOK, status)
	next(t, adminFeed)

	// alice's token now speaks for bob: her job's stream is no longer hers to read. The admin
	// token is revoked.
	b.srv.SetTokens(editTokens(b.srv.tokens.Load(), func(m map[string]TokenRecord) {
		rec := m[aliceHash]
		rec.Agent = "bob"
		m[aliceHash] = rec
		delete(m, adminHash)
	}))
	for _, ch := range []<-chan sseEvent{aliceFeed, adminFeed} {
		last := requireFeedEnds(t, ch)
		require.Equal(t, "error", last.event)
		require.JSONEq(t, `{"code":"unauthorized"}`, last.data)
	}
	require.Eventually(t, func() bool {
		return b.srv.feeds.count(HashToken(b.tokens["alice"])[:8]) == 0 && b.srv.feeds.count(adminHash[:8]) == 0
	}, 30*time.Second, 10*time.Millisecond, "the ended streams give their slots back")

	// bob's stream goes on: it sees his job cancelled, then its end.
	_, err := b.eng.Cancel(ctx, bobJob, "agent:bob")
	require.NoError(t, err)
	evs := until(t, bobFeed, "end")
	require.Equal(t, []string{"job.pending->cancelled", "end"}, eventTypes(evs))

	// The revoked token cannot open a new stream.
	_, status = openFeed(t, ctx, srv.URL+"/events", b.tokens["admin"], 0)
	require.Equal(t, http.StatusUnauthorized, status)
}

// openStream opens an event stream and returns its response (the caller closes it) or, for a
// refusal, the response with its body read.
func openStream(t *testing.T, ctx context.Context, url, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// requireTooManyStreams checks a refusal for the stream cap: 429, Retry-After, a JSON error
// naming the cap.
func requireTooManyStreams(t *testing.T, resp *http.Response) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	var body wire.ErrorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, CodeTooManyStreams, body.Error.Code)
	require.Contains(t, body.Error.Message, "max_streams_per_token")
	require.Contains(t, body.Error.Message, " 2 ")
}

// TestEventStreamCap: a token holds at most max_streams_per_token streams open; one more is
// refused with 429, and closing one frees its slot. Other tokens have slots of their own.
func TestEventStreamCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.MaxStreamsPerToken = 2
	srv := httptest.NewServer(b.srv.Handler())
	t.Cleanup(srv.Close)
	ctx := t.Context()
	id := b.submitJob(t, "alice")
	jobURL := srv.URL + "/jobs/" + id + "/events"

	firstCtx, closeFirst := context.WithCancel(ctx)
	require.Equal(t, http.StatusOK, openStream(t, firstCtx, srv.URL+"/events", b.tokens["admin"]).StatusCode)
	require.Equal(t, http.StatusOK, openStream(t, ctx, jobURL, b.tokens["admin"]).StatusCode)
	requireTooManyStreams(t, openStream(t, ctx, jobURL, b.tokens["admin"]))
	require.Equal(t, http.StatusOK, openStream(t, ctx, jobURL, b.tokens["alice"]).StatusCode, "another token's slots")

	closeFirst()
	admin := HashToken(b.tokens["admin"])[:8]
	require.Eventually(t, func() bool { return b.srv.feeds.count(admin) < 2 }, 30*time.Second, 10*time.Millisecond,
		"a closed stream gives its slot back")
	require.Equal(t, http.StatusOK, openStream(t, ctx, srv.URL+"/events", b.tokens["admin"]).StatusCode)
	requireTooManyStreams(t, openStream(t, ctx, srv.URL+"/events", b.tokens["admin"]))
}

// TestEventStreamCapLoopback: tokenless dev mode's callers are one identity, and share one cap.
func TestEventStreamCapLoopback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.MaxStreamsPerToken = 2
	dev := New(b.with(Options{Auth: AuthOptions{AllowUnauthenticatedLoopback: true},
		Logger: slog.New(slog.DiscardHandler)}))
	srv := httptest.NewServer(dev.Handler())
	t.Cleanup(srv.Close)
	ctx := t.Context()
	require.Equal(t, http.StatusOK, openStream(t, ctx, srv.URL+"/events", "").StatusCode)
	require.Equal(t, http.StatusOK, openStream(t, ctx, srv.URL+"/events", "").StatusCode)
	requireTooManyStreams(t, openStream(t, ctx, srv.URL+"/events", ""))

	// Tokens configured later (a reload in dev mode): the tokenless streams end.
	set, _ := testTokens(t)
	dev.SetTokens(set)
	require.Eventually(t, func() bool { return dev.feeds.count(loopbackTokenID) == 0 }, 30*time.Second, 10*time.Millisecond)
}
