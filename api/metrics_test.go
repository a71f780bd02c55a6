package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMetricsToken: with metrics_token set, GET /metrics wants that bearer token (as a
// Prometheus scrape config sends it) or an admin token; anything else is refused.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	const metricsToken = "scrape-0123456789abcdef"
	cfg := testConfig(t)
	cfg.MetricsToken = metricsToken
	set, tokens := testTokens(t)
	srv := httptest.NewServer(New(Options{Config: cfg, Auth: AuthOptions{Tokens: set}, Logger: slog.New(slog.DiscardHandler)}).Handler())
	t.Cleanup(srv.Close)

	scrape := func(auth string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	for _, tc := range []struct {
		name, auth string
		status     int
	}{
		{"MetricsToken", "Bearer " + metricsToken, http.StatusOK},
		{"SchemeAnyCase", "bearer " + metricsToken, http.StatusOK},
		{"AdminToken", "Bearer " + tokens["admin"], http.StatusOK},
		{"None", "", http.StatusUnauthorized},
		{"Wrong", "Bearer " + metricsToken + "x", http.StatusUnauthorized},
		{"Prefix", "Bearer " + metricsToken[:10], http.StatusUnauthorized},
		{"Basic", "Basic " + metricsToken, http.StatusUnauthorized},
		{"AgentToken", "Bearer " + tokens["alice"], http.StatusForbidden},
		{"WorkerToken", "Bearer " + tokens["worker"], http.StatusForbidden},
	} {
		resp := scrape(tc.auth)
		require.Equal(t, tc.status, resp.StatusCode, tc.name)
		if tc.status == http.StatusOK {
			var buf bytes.Buffer
			_, err := buf.ReadFrom(resp.Body)
			require.NoError(t, err)
			require.Contains(t, buf.String(), "gpu_orchestrator_http_requests_total", tc.name)
			continue
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body), tc.name)
		require.NotEmpty(t, body.Error.Code, tc.name)
		require.NotContains(t, body.Error.Message, metricsToken, tc.name)
	}

	// Without metrics_token, /metrics stays open.
	open := httptest.NewServer(New(Options{Config: testConfig(t), Auth: AuthOptions{Tokens: set}, Logger: slog.New(slog.DiscardHandler)}).Handler())
	t.Cleanup(open.Close)
	resp, err := http.Get(open.URL + "/metrics")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
