package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

func load(t *testing.T, yaml string, env map[string]string) (*config.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return config.Load(path, func(k string) string { return env[k] })
}

func TestAdmissionDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "", nil)
	require.NoError(t, err)
	a := cfg.Admission
	require.False(t, a.Disabled)
	require.Equal(t, config.AdmissionPolicy{RatePerSec: 5000, Burst: 10000, MaxPending: 0}, a.DefaultPolicy)
	require.Equal(t, 90.0, a.GPUHighWatermarkPct)
	require.Equal(t, 80.0, a.GPULowWatermarkPct)
	require.Equal(t, 30*time.Second, a.GPUHold)
	require.Equal(t, time.Second, a.RefreshInterval)
	require.Equal(t, config.LimiterDownClosed, a.LimiterDownGPU)
	require.Equal(t, config.LimiterDownOpen, a.LimiterDownCPU)

	cfg, err = load(t, "admission: {default_policy: {rate_per_sec: 0.5}}\n", map[string]string{"ORCH_ADMISSION_DISABLED": "true"})
	require.NoError(t, err)
	require.True(t, cfg.Admission.Disabled)
	require.Equal(t, 1, cfg.Admission.DefaultPolicy.Burst, "a burst of 2 s of the rate, at least 1")
}

func TestAdmissionValidation(t *testing.T) {
	t.Parallel()
	const types = `
job_types:
  gpu_a: {handler: noop, gpu_memory_mb: 100, queue_limit: 10, cpu_fallback: cpu_a}
  gpu_b: {handler: noop, gpu_memory_mb: 100}
  cpu_a: {handler: noop}
`
	_, err := load(t, types, nil)
	require.NoError(t, err)

	for _, tc := range []struct{ name, yaml, want string }{
		{"UnknownFallback", "job_types: {a: {handler: noop, queue_limit: 1, cpu_fallback: nope}}\n", `cpu_fallback "nope": no such job type`},
		{"GPUFallback", "job_types: {a: {handler: noop, queue_limit: 1, cpu_fallback: b}, b: {handler: noop, gpu_memory_mb: 1}}\n", "a fallback must be a CPU type"},
		{"SelfFallback", "job_types: {a: {handler: noop, queue_limit: 1, cpu_fallback: a}}\n", "its own fallback"},
		{"FallbackWithoutLimit", "job_types: {a: {handler: noop, cpu_fallback: b}, b: {handler: noop}}\n", "needs a queue_limit"},
		{"NegativeQueueLimit", "job_types: {a: {handler: noop, queue_limit: -1}}\n", "queue_limit must not be negative"},
		{"Watermarks", "admission: {gpu_high_watermark_pct: 70}\n", "gpu_low_watermark_pct (80) < gpu_high_watermark_pct (70)"},
		{"HighOver100", "admission: {gpu_high_watermark_pct: 101}\n", "<= 100"},
		{"Rate", "admission: {default_policy: {rate_per_sec: -1}}\n", "admission.default_policy.rate_per_sec"},
		{"Burst", "admission: {default_policy: {burst: -5}}\n", "admission.default_policy.burst"},
		{"MaxPending", "admission: {default_policy: {max_pending: -1}}\n", "admission.default_policy.max_pending"},
		{"MaxGPUs", "admission: {default_policy: {max_gpus: -1}}\n", "admission.default_policy.max_gpus"},
		{"MaxGPUMemoryMB", "admission: {default_policy: {max_gpu_memory_mb: 9000000000}}\n", "admission.default_policy.max_gpu_memory_mb"},
		{"LimiterDown", "admission: {limiter_down_gpu: maybe}\n", `limiter_down_gpu "maybe": want open or closed`},
		{"Refresh", "admission: {refresh_interval: 10ms}\n", "refresh_interval 10ms"},
		{"NegativeHold", "admission: {gpu_hold: -1s}\n", "gpu_hold must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, tc.yaml, nil)
			require.ErrorContains(t, err, tc.want)
		})
	}

	_, err = load(t, "", map[string]string{"ORCH_ADMISSION_DISABLED": "perhaps"})
	require.ErrorContains(t, err, "ORCH_ADMISSION_DISABLED")
}
