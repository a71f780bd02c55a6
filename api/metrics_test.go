package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/metrics/metricstest"
)

// TestMetricsEndpoint scrapes GET /metrics of the real API, wired as the orchestrator wires it,
// and parses the exposition as Prometheus does.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	mb := metricstest.New(t)
	mb.Populate(t)
	set, tokens := testTokens(t)
	srv := httptest.NewServer(New(Options{Engine: mb.Engine, Config: mb.Config, Store: mb.Store, Streams: mb.Streams, Leases: mb.Leases,
		Auth: AuthOptions{Tokens: set}, Logger: slog.New(slog.DiscardHandler),
		Metrics: mb.Metrics}).Handler())
	t.Cleanup(srv.Close)

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/jobs/submit", strings.NewReader(`{"type":"noop","payload":{}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokens["alice"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	mb.Engine.FlushMarks(t.Context()) // the publish that follows the answer

	resp, err = http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(&buf)
	require.NoError(t, err)

	for _, name := range metricstest.Required {
		require.Contains(t, fams, name)
	}
	require.Equal(t, dto.MetricType_HISTOGRAM, fams["gpu_orchestrator_job_wait_seconds"].GetType())
	require.Equal(t, 1.0, counter(t, fams["gpu_orchestrator_http_requests_total"], map[string]string{"route": "/jobs/submit", "code": "202"}))
	require.Zero(t, counter(t, fams["gpu_orchestrator_http_requests_total"], map[string]string{"route": "/jobs/:id", "code": "200"}),
		"every route is pre-created at 0")
	require.Equal(t, 1.0, counter(t, fams["gpu_orchestrator_jobs_total"], map[string]string{"type": "noop", "status": "pending"}))
	require.Equal(t, 1.0, counter(t, fams["gpu_orchestrator_job_queue_depth"], map[string]string{"stream": "noop"}),
		"the submitted job waits in its stream")
	require.Equal(t, 1.0, counter(t, fams["gpu_orchestrator_is_leader"], nil))
}

// counter returns the value of the counter or gauge sample of f whose labels include want.
func counter(t *testing.T, f *dto.MetricFamily, want map[string]string) float64 {
	t.Helper()
	require.NotNil(t, f)
	for _, m := range f.GetMetric() {
		matched := 0
		for _, lp := range m.GetLabel() {
			if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
				matched++
			}
		}
		if matched != len(want) {
			continue
		}
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	require.Failf(t, "no such sample", "%s%v", f.GetName(), want)
	return 0
}

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
