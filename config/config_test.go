package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

func TestSubmitBatchConcurrency(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "", nil)
	require.NoError(t, err)
	require.Equal(t, config.SubmitBatchConcurrencyDefault, cfg.SubmitBatchConcurrency)

	cfg, err = load(t, "submit_batch_concurrency: 4\n", nil)
	require.NoError(t, err)
	require.Equal(t, 4, cfg.SubmitBatchConcurrency)

	cfg, err = load(t, "submit_batch_concurrency: 4\n", map[string]string{"ORCH_SUBMIT_BATCH_CONCURRENCY": "8"})
	require.NoError(t, err)
	require.Equal(t, 8, cfg.SubmitBatchConcurrency, "the environment wins")

	for _, bad := range []string{"-1", "1025"} {
		_, err = load(t, "submit_batch_concurrency: "+bad+"\n", nil)
		require.ErrorContains(t, err, "submit_batch_concurrency must be in 1..1024, not "+bad)
	}
}
