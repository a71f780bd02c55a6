package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

// tokenlessCall is one request to a real server on 127.0.0.1.
type tokenlessCall struct {
	method, path, body, contentType string
	host, origin, fetchSite, token  string
}

func doCall(t *testing.T, base string, c tokenlessCall) (int, wire.ErrorDetail) {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(t.Context(), c.method, base+c.path, body)
	require.NoError(t, err)
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	if c.host != "" {
		req.Host = c.host
	}
	if c.origin != "" {
		req.Header.Set("Origin", c.origin)
	}
	if c.fetchSite != "" {
		req.Header.Set("Sec-Fetch-Site", c.fetchSite)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var eb wire.ErrorBody
	if resp.StatusCode >= 400 {
		require.NoError(t, json.Unmarshal(raw, &eb), "a JSON error body: %s", raw)
		require.NotEmpty(t, eb.Error.Message)
	}
	return resp.StatusCode, eb.Error
}

// TestTokenlessMode drives a dev-mode server (no token, AllowUnauthenticatedLoopback) over real
// HTTP on 127.0.0.1, as a web page in the operator's browser would: DNS rebinding (a foreign
// Host), cross-site requests (a foreign Origin, Sec-Fetch-Site) and simple requests that need no
// preflight (text/plain, forms) are refused; the operator's own calls go through.
func TestTokenlessMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := New(b.with(Options{Auth: AuthOptions{AllowUnauthenticatedLoopback: true}, Logger: slog.New(slog.DiscardHandler)}))
	ts := httptest.NewServer(srv.Handler()) // 127.0.0.1
	t.Cleanup(ts.Close)
	u, err := url.Parse(ts.URL)
	require.NoError(t, err)
	port := u.Port()
	const job = `{"type":"noop","agent":"dev","payload":{}}`
	submit := func(c tokenlessCall) (int, wire.ErrorDetail) {
		c.method, c.path, c.body = http.MethodPost, "/jobs/submit", job
		return doCall(t, ts.URL, c)
	}

	t.Run("OwnCallsAreAdmin", func(t *testing.T) {
		for _, host := range []string{"", "localhost:" + port, "LocalHost:" + port, "127.0.0.1:" + port, "127.1.2.3:" + port, "[::1]:" + port, "localhost"} {
			status, d := submit(tokenlessCall{contentType: "application/json", host: host})
			require.Equal(t, http.StatusAccepted, status, "Host %q: %+v", host, d)
		}
		status, d := submit(tokenlessCall{contentType: "application/json; charset=utf-8", origin: ts.URL})
		require.Equal(t, http.StatusAccepted, status, "the server's own origin: %+v", d)
		status, _ = doCall(t, ts.URL, tokenlessCall{method: http.MethodGet, path: "/jobs", fetchSite: "same-origin"})
		require.Equal(t, http.StatusOK, status)
	})

	before := b.countJobs(t, "dev")
	t.Run("ForeignHostIs403", func(t *testing.T) {
		// DNS rebinding: the page's own name resolves to 127.0.0.1 and is the request's Host.
		for _, host := range []string{"rebind.example:" + port, "rebind.example", "localhost.rebind.example:" + port, "10.0.0.1:" + port, "0.0.0.0:" + port} {
			status, d := submit(tokenlessCall{contentType: "application/json", host: host})
			require.Equal(t, http.StatusForbidden, status, "Host %q", host)
			require.Equal(t, CodeForbidden, d.Code)
			status, _ = doCall(t, ts.URL, tokenlessCall{method: http.MethodGet, path: "/jobs", host: host})
			require.Equal(t, http.StatusForbidden, status, "GET, Host %q: reads are refused too", host)
		}
	})
	t.Run("ForeignOriginIs403", func(t *testing.T) {
		for _, origin := range []string{"http://evil.example", "null", "https://127.0.0.1:" + port, "http://localhost:" + port, "http://127.0.0.1:1"} {
			status, d := submit(tokenlessCall{contentType: "application/json", origin: origin})
			require.Equal(t, http.StatusForbidden, status, "Origin %q", origin)
			require.Equal(t, CodeForbidden, d.Code)
		}
		status, _ := doCall(t, ts.URL, tokenlessCall{method: http.MethodPost, path: "/control/drain", origin: "http://evil.example"})
		require.Equal(t, http.StatusForbidden, status, "a body-less POST from another origin")
		status, _ = submit(tokenlessCall{contentType: "application/json", fetchSite: "cross-site"})
		require.Equal(t, http.StatusForbidden, status, "Sec-Fetch-Site: cross-site")
	})
	t.Run("NonJSONBodyIs415", func(t *testing.T) {
		for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"} {
			status, d := submit(tokenlessCall{contentType: ct})
			require.Equal(t, http.StatusUnsupportedMediaType, status, "Content-Type %q", ct)
			require.Equal(t, CodeUnsupportedMediaType, d.Code)
		}
	})
	require.Equal(t, before, b.countJobs(t, "dev"), "no refused request created a job")
}

// TestJSONBodiesOnly checks that the Content-Type rule holds with tokens too, and that the
// Host and Origin rules do not: a browser attaches no bearer token on a page's behalf.
func TestJSONBodiesOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ts := httptest.NewServer(b.srv.Handler())
	t.Cleanup(ts.Close)
	c := tokenlessCall{method: http.MethodPost, path: "/jobs/submit", body: `{"type":"noop","agent":"alice","payload":{}}`, token: b.tokens["alice"]}

	c.contentType = "text/plain"
	status, d := doCall(t, ts.URL, c)
	require.Equal(t, http.StatusUnsupportedMediaType, status)
	require.Equal(t, CodeUnsupportedMediaType, d.Code)

	c.contentType, c.host, c.origin = "application/json", "orchestrator.example", "https://dashboard.example"
	status, d = doCall(t, ts.URL, c)
	require.Equal(t, http.StatusAccepted, status, "%+v", d)

	// Requests without a body need no Content-Type.
	status, _ = doCall(t, ts.URL, tokenlessCall{method: http.MethodGet, path: "/jobs", token: b.tokens["alice"]})
	require.Equal(t, http.StatusOK, status)
}
