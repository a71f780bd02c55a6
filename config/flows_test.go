package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

func TestFlowsAndApprovalsConfig(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, "", nil)
		require.NoError(t, err)
		require.Equal(t, 2*time.Second, cfg.Flows.ResolveInterval)
		require.Equal(t, 200, cfg.Flows.ResolveBatch)
		require.Equal(t, 64<<10, cfg.Flows.ParentResultsMaxBytes)
		require.Equal(t, 5*time.Second, cfg.Approvals.RefreshInterval)
		require.Equal(t, 5*time.Second, cfg.Approvals.ExpireInterval)
		require.Empty(t, cfg.Approvals.Policies)
	})

	t.Run("Policies", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, `approvals:
  policies:
    - {name: big, min_gpus: 8, two_key: true}
    - {name: sleepy, type: sleep, ttl: 1h, on_expiry: escalate}
`, nil)
		require.NoError(t, err)
		require.Equal(t, []config.ApprovalPolicy{
			{Name: "big", MinGPUs: 8, TwoKey: true, TTL: config.ApprovalTTLDefault, OnExpiry: "reject"},
			{Name: "sleepy", Type: "sleep", TTL: time.Hour, OnExpiry: "escalate"},
		}, cfg.Approvals.Policies)
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for yaml, want := range map[string]string{
			"flows: {resolve_interval: 1ms}\n":                                       "flows.resolve_interval",
			"flows: {parent_results_max_bytes: 1000000}\n":                           "flows.parent_results_max_bytes",
			"approvals: {expire_interval: 2m}\n":                                     "approvals.expire_interval",
			"approvals: {policies: [{name: all}]}\n":                                 "matches every job",
			"approvals: {policies: [{name: x, type: nope}]}\n":                       "not a configured job type",
			"approvals: {policies: [{name: x, type: sleep, on_expiry: shrug}]}\n":    "on_expiry",
			"approvals: {policies: [{name: x, type: sleep, ttl: 1ms}]}\n":            "ttl",
			"approvals: {policies: [{name: x, type: sleep}, {name: x, agent: a}]}\n": "named twice",
			"approvals: {policies: [{name: Bad Name, type: sleep}]}\n":               ".name",
		} {
			_, err := load(t, yaml, nil)
			require.ErrorContains(t, err, want, yaml)
		}
	})
}
