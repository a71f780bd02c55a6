package api_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/metrics/metricstest"
)

// TestMetricsEndpoint scrapes GET /metrics of the real API, wired as the orchestrator wires it,
// and parses the exposition as Prometheus does. It is an external test: metricstest builds an
// API of its own.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	mb := metricstest.New(t)
	mb.Populate(t)
	token, line, err := api.GenerateToken(string(api.RoleAgent), "alice")
	require.NoError(t, err)
	set, err := api.LoadTokens("", line)
	require.NoError(t, err)
	// A second server over the registry counts on the request metrics of the first.
	srv := httptest.NewServer(api.New(api.Options{Engine: mb.Engine, Config: mb.Config, Store: mb.Store, Streams: mb.Streams,
		Leases: mb.Leases, Auth: api.AuthOptions{Tokens: set}, Logger: slog.New(slog.DiscardHandler), Metrics: mb.Metrics}).Handler())
	t.Cleanup(srv.Close)

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/jobs/submit", strings.NewReader(`{"type":"noop","payload":{}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
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
	require.Equal(t, 1.0, metricstest.Value(t, fams, "gpu_orchestrator_http_requests_total", map[string]string{"route": "/jobs/submit", "code": "202"}))
	require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_http_requests_total", map[string]string{"route": "/jobs/:id", "code": "200"}),
		"every route is pre-created at 0")
	require.Equal(t, 1.0, metricstest.Value(t, fams, "gpu_orchestrator_jobs_total", map[string]string{"type": "noop", "status": "pending"}))
	require.Equal(t, 1.0, metricstest.Value(t, fams, "gpu_orchestrator_job_queue_depth", map[string]string{"stream": "noop"}),
		"the submitted job waits in its stream")
	require.Equal(t, 1.0, metricstest.Value(t, fams, "gpu_orchestrator_is_leader", nil))
}
