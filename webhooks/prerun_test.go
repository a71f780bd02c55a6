package webhooks_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/webhooks"
	"github.com/gpuorch/orchestrator/wire"
)

// preRunSecret signs the pre-run calls of the tests.
const preRunSecret = "pre-run-secret-0123456789abcdef"

// TestPreRun: the decision a hook's answer makes (2xx runs, 4xx fails for good with the hook's
// message, anything else retries), and what the hook receives: the job, signed.
func TestPreRun(t *testing.T) {
	t.Parallel()
	var (
		answer atomic.Value // func(w http.ResponseWriter, r *http.Request)
		got    atomic.Value // []byte: the last body
		sig    atomic.Value // string: its signature
		key    atomic.Value // string: its idempotency key
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got.Store(body)
		sig.Store(r.Header.Get(wire.HeaderSignature))
		key.Store(r.Header.Get(wire.HeaderIdempotencyKey))
		answer.Load().(func(http.ResponseWriter, *http.Request))(w, r)
	}))
	t.Cleanup(hook.Close)
	cfg, err := config.Load("", func(k string) string {
		return map[string]string{"ORCH_WEBHOOKS_ALLOW_PRIVATE": "1", "ORCH_WEBHOOKS_PRE_RUN": "noop=" + hook.URL + "/pre",
			"ORCH_WEBHOOKS_PRE_RUN_SECRET": preRunSecret}[k]
	})
	require.NoError(t, err)
	cfg.Webhooks.PreRunTimeout = 500 * time.Millisecond
	pr := webhooks.NewPreRun(cfg, webhooks.PreRunOptions{})
	require.Equal(t, []string{"noop"}, pr.Types())
	job := store.Job{ID: "j1", Type: "noop", Agent: "ag", Status: store.JobRunning, Attempts: 2, MaxAttempts: 3,
		Payload: json.RawMessage(`{"prompt":"hi"}`)}

	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		want   wire.PreRunResponse
	}{
		{"OK", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) },
			wire.PreRunResponse{Decision: wire.PreRunRun, StatusCode: 204}},
		{"ForbiddenJSON", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"message":"agent ag is over its monthly budget"}`)
		}, wire.PreRunResponse{Decision: wire.PreRunFail, Message: "agent ag is over its monthly budget", StatusCode: 403}},
		{"ForbiddenErrorObject", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":{"code":"x","message":"bad input"}}`)
		}, wire.PreRunResponse{Decision: wire.PreRunFail, Message: "bad input", StatusCode: 422}},
		{"ForbiddenText", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, "  not\ntoday  ")
		}, wire.PreRunResponse{Decision: wire.PreRunFail, Message: "not today", StatusCode: 403}},
		{"ForbiddenEmpty", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) },
			wire.PreRunResponse{Decision: wire.PreRunFail, Message: "the pre-run hook refused the job (HTTP 404)", StatusCode: 404}},
		{"Unavailable", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "busy")
		}, wire.PreRunResponse{Decision: wire.PreRunRetry, Message: "pre-run hook: HTTP 503: busy", StatusCode: 503}},
		{"RateLimited", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTooManyRequests) },
			wire.PreRunResponse{Decision: wire.PreRunRetry, Message: "pre-run hook: HTTP 429", StatusCode: 429}},
		{"Redirect", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "http://169.254.169.254/")
			w.WriteHeader(http.StatusFound)
		}, wire.PreRunResponse{Decision: wire.PreRunRetry, Message: "pre-run hook: HTTP 302", StatusCode: 302}},
		{"Timeout", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, // answers only once the caller gave up
			wire.PreRunResponse{Decision: wire.PreRunRetry, Message: "pre-run hook: timed out"}},
	} {
		answer.Store(tc.answer)
		require.Equal(t, tc.want, pr.Check(t.Context(), job), tc.name)
		body := got.Load().([]byte)
		require.True(t, verifySignature(preRunSecret, sig.Load().(string), body, time.Now()), tc.name)
		require.Equal(t, "pre_run-j1-2", key.Load(), "one key per attempt")
		var ev wire.WebhookEvent
		require.NoError(t, json.Unmarshal(body, &ev))
		require.Equal(t, webhooks.EventPreRun, ev.Type)
		var d wire.WebhookJobData
		require.NoError(t, json.Unmarshal(ev.Data, &d))
		require.Equal(t, wire.WebhookJobData{JobID: "j1", Type: "noop", Agent: "ag", Status: "running", Attempt: 2, MaxAttempts: 3,
			Payload: json.RawMessage(`{"prompt":"hi"}`)}, d)
	}

	// A type without a hook runs, uncalled; a payload too large for the body is left out.
	require.Equal(t, wire.PreRunResponse{Decision: wire.PreRunRun}, pr.Check(t.Context(), store.Job{ID: "j2", Type: "sleep"}))
	answer.Store(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	job.Payload = json.RawMessage(`"` + strings.Repeat("p", cfg.Webhooks.MaxBodyBytes) + `"`)
	require.Equal(t, wire.PreRunRun, pr.Check(t.Context(), job).Decision)
	var ev wire.WebhookEvent
	require.NoError(t, json.Unmarshal(got.Load().([]byte), &ev))
	require.Contains(t, string(ev.Data), `"payload_omitted":true`)
	require.NotContains(t, string(ev.Data), `"payload":`)
}
