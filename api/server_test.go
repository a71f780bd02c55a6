package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

func TestRecoveryAnswersJSON500(t *testing.T) {
	t.Parallel()
	srv := New(Options{Logger: slog.New(slog.DiscardHandler)})
	srv.handler.GET("/panic", func(*gin.Context) { panic("boom") })
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/panic", nil))
	requireError(t, rec, http.StatusInternalServerError, CodeInternal, "")
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	b := setupDown(t)
	requireError(t, b.request(t, http.MethodGet, "/nope", "admin", nil), http.StatusNotFound, CodeNotFound, "")
	requireError(t, b.request(t, http.MethodDelete, "/jobs/submit", "admin", nil), http.StatusMethodNotAllowed, CodeMethodNotAllowed, "")
}

// TestPostRoutesAnswer405ToGet: GET /jobs/submit matches GET /jobs/:id too; it answers 405 with
// Allow: POST when no job has that name, and a job that has it is still served.
func TestPostRoutesAnswer405ToGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/jobs/submit", "/jobs/submit_batch"} {
		rec := b.request(t, http.MethodGet, path, "admin", nil)
		d := requireError(t, rec, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "")
		require.Equal(t, http.MethodPost, rec.Header().Get("Allow"), path)
		require.Equal(t, "method GET is not allowed on "+path, d.Message)
		// An agent token gets the same answer (another agent's job of that name stays hidden).
		requireError(t, b.request(t, http.MethodGet, path, "alice", nil), http.StatusMethodNotAllowed, CodeMethodNotAllowed, "")
	}
	rec := b.request(t, http.MethodDelete, "/jobs/submit", "admin", nil)
	requireError(t, rec, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "")
	require.Contains(t, rec.Header().Get("Allow"), http.MethodPost)

	// Real ids, and a job named like the route, are served as before; an unknown id is a 404.
	id := b.submitJob(t, "alice")
	require.Equal(t, http.StatusOK, b.request(t, http.MethodGet, "/jobs/"+id, "admin", nil).Code)
	rec = b.request(t, http.MethodPost, "/jobs/submit", "admin", `{"job_id":"submit","type":"noop","agent":"alice","payload":{}}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	rec = b.request(t, http.MethodGet, "/jobs/submit", "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Empty(t, rec.Header().Get("Allow"))
	requireError(t, b.request(t, http.MethodGet, "/jobs/no-such-job", "admin", nil), http.StatusNotFound, CodeNotFound, "")
}

func TestNewHTTPServer(t *testing.T) {
	t.Parallel()
	h := http.NewServeMux()
	s := NewHTTPServer("127.0.0.1:0", h)
	require.Equal(t, "127.0.0.1:0", s.Addr)
	require.Equal(t, 5*time.Second, s.ReadHeaderTimeout)
	require.Equal(t, 30*time.Second, s.ReadTimeout)
	require.Equal(t, 60*time.Second, s.WriteTimeout)
	require.Equal(t, 120*time.Second, s.IdleTimeout)
	require.Equal(t, 64<<10, s.MaxHeaderBytes)
}

// TestRequestLog checks the debug request log: route, status and duration, never the token
// nor the payload.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	down := setupDown(t)
	set, tokens := testTokens(t)
	srv := New(down.with(Options{Auth: AuthOptions{Tokens: set},
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}))
	b := &bundle{srv: srv, tokens: tokens}

	rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", `{"type":"noop","payload":{"secret":"hunter2"}}`)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	line := buf.String()
	require.Contains(t, line, "msg=request")
	require.Contains(t, line, "route=/jobs/submit")
	require.Contains(t, line, "status=503")
	require.Contains(t, line, "duration=")
	require.Contains(t, line, "token_id="+HashToken(tokens["alice"])[:8])
	require.NotContains(t, line, tokens["alice"])
	require.NotContains(t, line, "hunter2")

	buf.Reset()
	b.request(t, http.MethodGet, "/no/such/route", "", nil)
	require.Contains(t, buf.String(), "route=unmatched")
	require.Contains(t, buf.String(), "status=404")
}
