package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

func TestWebhooks(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "", nil)
	require.NoError(t, err)
	w := cfg.Webhooks
	require.False(t, w.AllowPrivate)
	require.Empty(t, w.CallbackSecret, "unset: callbacks are refused")
	require.Equal(t, config.WebhooksMaxConsecutiveFailuresDefault, w.MaxConsecutiveFailures)
	require.Equal(t, config.WebhooksGapWindowDefault, w.GapWindow)
	require.Equal(t, config.WebhooksBackoffMaxDefault, w.Backoff.Max)
	require.Equal(t, config.BackoffJitterDefault, w.Backoff.Jitter)

	yaml := `
webhooks:
  allow_private: false
  pre_run: {noop: "https://hooks.example.com/pre"}
  pre_run_secret: pre-0123456789abcdef
  max_consecutive_failures: 4
  backoff: {initial: 2s}
`
	cfg, err = load(t, yaml, map[string]string{
		"ORCH_WEBHOOKS_ALLOW_PRIVATE":            "1",
		"ORCH_WEBHOOKS_CALLBACK_SECRET":          "cb-0123456789abcdef",
		"ORCH_WEBHOOKS_MAX_CONSECUTIVE_FAILURES": "3",
		"ORCH_WEBHOOKS_INTERVAL_MS":              "50",
		"ORCH_WEBHOOKS_PRE_RUN":                  "sleep=http://127.0.0.1:9/pre",
	})
	require.NoError(t, err)
	w = cfg.Webhooks
	require.True(t, w.AllowPrivate, "the environment wins")
	require.Equal(t, "cb-0123456789abcdef", w.CallbackSecret)
	require.Equal(t, 3, w.MaxConsecutiveFailures)
	require.Equal(t, 50*time.Millisecond, w.Interval)
	require.Equal(t, map[string]string{"sleep": "http://127.0.0.1:9/pre"}, w.PreRun, "the environment's map replaces the file's")
	require.Equal(t, 2*time.Second, w.Backoff.Initial)

	file := filepath.Join(t.TempDir(), "callback-secret")
	require.NoError(t, os.WriteFile(file, []byte("file-0123456789abcdef\n"), 0o600))
	cfg, err = load(t, "", map[string]string{"ORCH_WEBHOOKS_CALLBACK_SECRET_FILE": file})
	require.NoError(t, err)
	require.Equal(t, "file-0123456789abcdef", cfg.Webhooks.CallbackSecret)

	// A worker reads the hooks without their secret; the orchestrator refuses to start so.
	cfg, err = load(t, "webhooks: {pre_run: {noop: 'https://h.example.com/'}}\n", nil)
	require.NoError(t, err)
	require.ErrorContains(t, cfg.Webhooks.RequirePreRunSecret(), "webhooks.pre_run_secret is required")
	cfg.Webhooks.PreRunSecret = "pre-0123456789abcdef"
	require.NoError(t, cfg.Webhooks.RequirePreRunSecret())

	for _, tc := range []struct {
		yaml string
		env  map[string]string
		want string
	}{
		{"webhooks: {callback_secret: short}\n", nil, "webhooks.callback_secret must be at least 16"},
		{"webhooks: {pre_run: {nope: 'https://h.example.com/'}, pre_run_secret: pre-0123456789abcdef}\n", nil,
			"webhooks.pre_run.nope: no such job type"},
		{"webhooks: {pre_run: {noop: 'http://127.0.0.1/'}, pre_run_secret: pre-0123456789abcdef}\n", nil,
			"webhooks.pre_run.noop: the URL address 127.0.0.1 is loopback"},
		{"webhooks: {pre_run: {noop: 'ftp://h.example.com/'}, pre_run_secret: pre-0123456789abcdef}\n", nil, "http or https"},
		{"webhooks: {concurrency: 1000}\n", nil, "webhooks.concurrency must be in 1..256"},
		{"webhooks: {interval: 1h}\n", nil, "webhooks.interval 1h0m0s: want 10ms..1m"},
		{"webhooks: {callback_secret: cb-0123456789abcdef, callback_secret_file: " + file + "}\n", nil, "both set"},
		{"", map[string]string{"ORCH_WEBHOOKS_PRE_RUN": "noop"}, "want type=url"},
		{"", map[string]string{"ORCH_WEBHOOKS_MAX_ATTEMPTS": "-2"}, "ORCH_WEBHOOKS_MAX_ATTEMPTS"},
		{"", map[string]string{"ORCH_WEBHOOKS_ALLOW_PRIVATE": "perhaps"}, "ORCH_WEBHOOKS_ALLOW_PRIVATE"},
	} {
		_, err := load(t, tc.yaml, tc.env)
		require.ErrorContains(t, err, tc.want, tc.yaml)
	}
}
