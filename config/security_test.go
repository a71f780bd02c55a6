package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

func TestMaxStreamsPerToken(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "", nil)
	require.NoError(t, err)
	require.Equal(t, config.MaxStreamsPerTokenDefault, cfg.MaxStreamsPerToken)

	cfg, err = load(t, "max_streams_per_token: 4\n", map[string]string{"ORCH_MAX_STREAMS_PER_TOKEN": "8"})
	require.NoError(t, err)
	require.Equal(t, 8, cfg.MaxStreamsPerToken, "the environment wins")

	_, err = load(t, "max_streams_per_token: -1\n", nil)
	require.ErrorContains(t, err, "max_streams_per_token must be in 1..100000")
	_, err = load(t, "", map[string]string{"ORCH_MAX_STREAMS_PER_TOKEN": "x"})
	require.ErrorContains(t, err, "ORCH_MAX_STREAMS_PER_TOKEN")
}

func TestMetricsToken(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "", nil)
	require.NoError(t, err)
	require.Empty(t, cfg.MetricsToken, "unset: /metrics stays open")

	cfg, err = load(t, "metrics_token: yaml-0123456789abcdef\n", map[string]string{"ORCH_METRICS_TOKEN": "env-0123456789abcdef"})
	require.NoError(t, err)
	require.Equal(t, "env-0123456789abcdef", cfg.MetricsToken)

	file := filepath.Join(t.TempDir(), "metrics-token")
	require.NoError(t, os.WriteFile(file, []byte("file-0123456789abcdef\n"), 0o600))
	cfg, err = load(t, "", map[string]string{"ORCH_METRICS_TOKEN_FILE": file})
	require.NoError(t, err)
	require.Equal(t, "file-0123456789abcdef", cfg.MetricsToken, "read from the file, its newline dropped")

	_, err = load(t, "metrics_token: yaml-0123456789abcdef\nmetrics_token_file: "+file+"\n", nil)
	require.ErrorContains(t, err, "both set")
	_, err = load(t, "metrics_token: short\n", nil)
	require.ErrorContains(t, err, "metrics_token must be at least 16 characters")
	_, err = load(t, "", map[string]string{"ORCH_METRICS_TOKEN_FILE": filepath.Join(t.TempDir(), "missing")})
	require.ErrorContains(t, err, "metrics_token_file")
}
