package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// recorded is one request the test server saw.
type recorded struct {
	Method, Path, Query, Auth, ContentType string
	Body                                   []byte
}

// server answers every request with status and body and records what it got.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"),
			r.Header.Get("Content-Type"), b})
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) last(t *testing.T) recorded {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NotEmpty(t, s.reqs)
	return s.reqs[len(s.reqs)-1]
}

func reply(status int, v any) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
}

func TestClientRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Submit", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, reply(http.StatusAccepted, client.SubmitResponse{JobID: "j1", Status: "pending", Created: true}))
		c := client.New(s.URL+"/", "tok")
		out, err := c.Submit(ctx, client.SubmitRequest{JobID: "j1", Type: "noop", Agent: "a", Payload: json.RawMessage(`{"x":1}`)})
		require.NoError(t, err)
		require.Equal(t, client.SubmitResponse{JobID: "j1", Status: "pending", Created: true}, out)
		r := s.last(t)
		require.Equal(t, "POST", r.Method)
		require.Equal(t, "/jobs/submit", r.Path)
		require.Equal(t, "Bearer tok", r.Auth)
		require.Equal(t, "application/json", r.ContentType)
		require.JSONEq(t, `{"job_id":"j1","type":"noop","agent":"a","payload":{"x":1}}`, string(r.Body))
	})

	t.Run("SubmitBatch", func(t *testing.T) {
		t.Parallel()
		want := client.SubmitBatchResponse{
			Results: []client.SubmitBatchResult{
				{JobID: "j1", Status: "pending", Created: true},
				{JobID: "j2", Error: &client.ErrorDetail{Code: "rate_limited", Message: "slow down"}, RetryAfterMS: 1500},
			},
			Created: 1, Failed: 1,
		}
		s := newServer(t, reply(http.StatusOK, want))
		out, err := client.New(s.URL, "tok").SubmitBatch(ctx, client.SubmitBatchRequest{Jobs: []client.SubmitRequest{
			{JobID: "j1", Type: "noop", Agent: "a", Payload: json.RawMessage(`{"x":1}`)},
			{JobID: "j2", Type: "noop", Agent: "a", Payload: json.RawMessage(`null`)},
		}})
		require.NoError(t, err)
		require.Equal(t, want, out)
		r := s.last(t)
		require.Equal(t, "POST", r.Method)
		require.Equal(t, "/jobs/submit_batch", r.Path)
		require.Equal(t, "Bearer tok", r.Auth)
		require.Equal(t, "application/json", r.ContentType)
		require.JSONEq(t, `{"jobs":[{"job_id":"j1","type":"noop","agent":"a","payload":{"x":1}},
			{"job_id":"j2","type":"noop","agent":"a","payload":null}]}`, string(r.Body))
	})

	t.Run("SubmitBatchResultWire", func(t *testing.T) {
		t.Parallel()
		raw, err := json.Marshal([]client.SubmitBatchResult{
			{JobID: "j1", Status: "pending", Created: true, Type: "infer_cpu", RoutedFrom: "infer"},
			{Error: &client.ErrorDetail{Code: "invalid_request", Message: "is required", Field: "type"}},
		})
		require.NoError(t, err)
		require.JSONEq(t, `[{"job_id":"j1","status":"pending","created":true,"type":"infer_cpu","routed_from":"infer"},
			{"created":false,"error":{"code":"invalid_request","message":"is required","field":"type"}}]`, string(raw))
	})

	t.Run("SubmitBatchRefusedWhole", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, reply(http.StatusBadRequest, client.ErrorBody{Error: client.ErrorDetail{
			Code: "invalid_request", Message: "must hold 1 to 1000 jobs, not 0", Field: "jobs"}}))
		_, err := client.New(s.URL, "t").SubmitBatch(ctx, client.SubmitBatchRequest{})
		require.True(t, client.IsStatus(err, http.StatusBadRequest), "%v", err)
		require.ErrorContains(t, err, "submit batch of jobs: 400 invalid_request: must hold 1 to 1000 jobs, not 0 (field jobs)")
	})

	t.Run("GetJobEscapesID", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, reply(http.StatusOK, client.Job{JobID: "a/b", Status: "done"}))
		out, err := client.New(s.URL, "").GetJob(ctx, "a/b")
		require.NoError(t, err)
		require.Equal(t, "done", out.Status)
		r := s.last(t)
		require.Equal(t, "GET", r.Method)
		require.Equal(t, "/jobs/a/b", r.Path) // decoded form of /jobs/a%2Fb
		require.Empty(t, r.Auth)
	})

	t.Run("ListJobsQuery", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, reply(http.StatusOK, client.JobList{Jobs: []client.Job{{JobID: "x"}}, NextCursor: "c2"}))
		out, err := client.New(s.URL, "t").ListJobs(ctx, client.ListJobsParams{Status: "pending", Agent: "ag", Limit: 5, Cursor: "c1"})
		require.NoError(t, err)
		require.Equal(t, "c2", out.NextCursor)
		require.Len(t, out.Jobs, 1)
		r := s.last(t)
		require.Equal(t, "/jobs", r.Path)
		require.Equal(t, "agent=ag&cursor=c1&limit=5&status=pending", r.Query)
	})

	t.Run("CancelJob", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, reply(http.StatusOK, client.Job{JobID: "j", Status: "cancelled"}))
		out, err := client.New(s.URL, "t").CancelJob(ctx, "j")
		require.NoError(t, err)
		require.Equal(t, "cancelled", out.Status)
		require.Equal(t, "/jobs/j/cancel", s.last(t).Path)
		require.Equal(t, "POST", s.last(t).Method)
	})

	t.Run("Internal", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/internal/jobs/claim":
				reply(200, client.ClaimResponse{Claimed: []client.ClaimedJob{{JobID: "j", Attempt: 1}}, Cancel: []string{"k"}})(w, r)
			case "/internal/jobs/start":
				reply(200, client.StartResponse{Cancel: []string{"s"}})(w, r)
			case "/internal/jobs/complete":
				reply(200, client.CompleteResponse{Outcomes: []client.CompleteOutcome{{JobID: "j", Outcome: "done"}}})(w, r)
			default:
				w.WriteHeader(http.StatusNotFound)
			}
		})
		c := client.New(s.URL, "t")
		cl, err := c.Claim(ctx, client.ClaimRequest{WorkerID: "w", Jobs: []client.ClaimItem{{JobID: "j", Stream: "s", MessageID: "1-0"}}})
		require.NoError(t, err)
		require.Equal(t, []string{"k"}, cl.Cancel)
		require.Equal(t, 1, cl.Claimed[0].Attempt)
		st, err := c.Start(ctx, client.StartRequest{WorkerID: "w", JobIDs: []string{"j"}})
		require.NoError(t, err)
		require.Equal(t, []string{"s"}, st.Cancel)
		co, err := c.Complete(ctx, client.CompleteRequest{WorkerID: "w", Results: []client.JobResult{{JobID: "j", Status: client.ResultDone}}})
		require.NoError(t, err)
		require.Equal(t, client.OutcomeDone, co.Outcomes[0].Outcome)
		require.JSONEq(t, `{"worker_id":"w","results":[{"job_id":"j","attempt":0,"status":"done"}]}`, string(s.last(t).Body))
	})

	t.Run("Health", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				reply(200, client.Health{Status: "ok"})(w, r)
				return
			}
			reply(503, client.Health{Status: "unavailable", Checks: map[string]string{"mysql": "down"}})(w, r)
		})
		c := client.New(s.URL, "")
		h, err := c.Healthz(ctx)
		require.NoError(t, err)
		require.Equal(t, "ok", h.Status)
		h, err = c.Readyz(ctx)
		require.True(t, client.IsStatus(err, http.StatusServiceUnavailable))
		require.Equal(t, "down", h.Checks["mysql"])
	})
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ErrorBodyAndRetryAfter", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			reply(http.StatusTooManyRequests, client.ErrorBody{Error: client.ErrorDetail{Code: "rate_limited", Message: "slow down", Field: "agent"}})(w, r)
		})
		_, err := client.New(s.URL, "t").Submit(ctx, client.SubmitRequest{Type: "noop"})
		require.Error(t, err)
		var apiErr *client.APIError
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, 429, apiErr.StatusCode)
		require.Equal(t, "rate_limited", apiErr.Code)
		require.Equal(t, "slow down", apiErr.Message)
		require.Equal(t, "agent", apiErr.Field)
		require.Equal(t, 7*time.Second, apiErr.RetryAfter)
		require.True(t, apiErr.Temporary())
		require.True(t, client.IsStatus(err, 429))
		require.False(t, client.IsStatus(err, 400))
		require.Contains(t, err.Error(), "submit job: 429 rate_limited: slow down")
	})

	t.Run("RetryAfterDate", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		_, err := client.New(s.URL, "t").GetJob(ctx, "x")
		var apiErr *client.APIError
		require.ErrorAs(t, err, &apiErr)
		require.InDelta(t, time.Hour.Seconds(), apiErr.RetryAfter.Seconds(), 5)
		require.Equal(t, "http_503", apiErr.Code)
	})

	t.Run("NonJSONError", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		})
		_, err := client.New(s.URL, "t").GetJob(ctx, "x")
		var apiErr *client.APIError
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, "http_502", apiErr.Code)
		require.Equal(t, "<html>bad gateway</html>", apiErr.Message)
		require.False(t, client.IsStatus(errors.New("other"), 502))
	})

	t.Run("BadJSONAnswer", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{not json") })
		_, err := client.New(s.URL, "t").GetJob(ctx, "x")
		require.ErrorContains(t, err, "decode answer")
	})

	t.Run("TimeoutWithoutDeadline", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		s := newServer(t, func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		t.Cleanup(func() { close(release) })
		start := time.Now()
		_, err := client.New(s.URL, "t", client.WithTimeout(100*time.Millisecond)).GetJob(ctx, "x")
		require.Error(t, err)
		require.Less(t, time.Since(start), 5*time.Second)
	})

	t.Run("CustomHTTPClientStillHasDeadline", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		s := newServer(t, func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		t.Cleanup(func() { close(release) })
		c := client.New(s.URL, "t", client.WithHTTPClient(&http.Client{}), client.WithTimeout(100*time.Millisecond))
		_, err := c.GetJob(ctx, "x")
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

// TestSubmitSentAgainOnAClosedConnection: a submit whose job has a job_id carries an
// Idempotency-Key, so when the kept-alive connection it went out on turns out closed (the
// server read it and hung up without answering), Go's transport sends it again on a new one.
// Without a job_id it is not idempotent, and the error is the caller's.
func TestSubmitSentAgainOnAClosedConnection(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, jobID string
		wantPosts   int
		wantErr     bool
	}{
		{"WithJobID", "j-keyed", 2, false},
		{"WithoutJobID", "", 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu    sync.Mutex
				posts []string // the Idempotency-Key of each POST
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					_ = json.NewEncoder(w).Encode(client.Health{Status: "ok"})
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				mu.Lock()
				posts = append(posts, r.Header.Get("Idempotency-Key"))
				first := len(posts) == 1
				mu.Unlock()
				if first { // hang up on the first submit without an answer
					conn, _, err := w.(http.Hijacker).Hijack()
					require.NoError(t, err)
					_ = conn.Close()
					return
				}
				w.WriteHeader(http.StatusAccepted)
				_ = json.NewEncoder(w).Encode(client.SubmitResponse{JobID: "j-keyed", Status: "pending", Created: true})
			}))
			t.Cleanup(srv.Close)
			api := client.New(srv.URL, "")
			_, err := api.Healthz(context.Background()) // the connection the submit will reuse
			require.NoError(t, err)
			_, err = api.Submit(context.Background(), client.SubmitRequest{JobID: c.jobID, Type: "noop", Agent: "a"})
			if c.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, posts, c.wantPosts)
			for _, key := range posts {
				require.Equal(t, c.jobID, key)
			}
		})
	}
}

func TestSubmitBatchKey(t *testing.T) {
	t.Parallel()
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		_ = json.NewEncoder(w).Encode(client.SubmitBatchResponse{})
	}))
	t.Cleanup(srv.Close)
	api := client.New(srv.URL, "")
	for _, jobs := range [][]client.SubmitRequest{
		{{JobID: "a"}, {JobID: "b"}},
		{{JobID: "a"}, {JobID: "b"}},
		{{JobID: "a"}, {JobID: "c"}},
		{{JobID: "a"}, {}},
	} {
		_, err := api.SubmitBatch(context.Background(), client.SubmitBatchRequest{Jobs: jobs})
		require.NoError(t, err)
	}
	require.Len(t, keys, 4)
	require.Len(t, keys[0], 64, "a digest of the ids")
	require.Equal(t, keys[0], keys[1], "the same ids, the same key")
	require.NotEqual(t, keys[0], keys[2])
	require.Empty(t, keys[3], "a job without an id: no key")
}
