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

// TestValidateEverySection breaks one key of each section at once: Validate reports them all,
// each naming its key.
func TestValidateEverySection(t *testing.T) {
	t.Parallel()
	_, err := load(t, `
dispatch_batch: 20000
log_format: xml
job_types:
  a: {handler: nope, stream: dlq}
  b: {handler: noop, stream: dlq}
worker: {concurrency: 20000, types: [zzz], commands: {x: {argv: []}}}
leases: {ttl: 1ms, safety_margin_mb: -1}
telemetry: {poll_interval: 1h}
admission: {gpu_high_watermark_pct: 101}
`, nil)
	for _, want := range []string{
		"dispatch_batch must be in 1..10000",
		`log_format "xml"`,
		`job_types.a.handler "nope"`,
		`job_types.a.stream "dlq" is reserved`,
		`job_types.b.stream "dlq" is also the stream of a`,
		"worker.commands.x.argv must name a program",
		"worker.concurrency must be in 1..10000",
		`worker.types: unknown job type "zzz"`,
		"leases.ttl 1ms",
		"leases.safety_margin_mb must not be negative",
		"telemetry.poll_interval 1h0m0s must be below leases.telemetry_freshness",
		"<= 100",
	} {
		require.ErrorContains(t, err, want)
	}
}
