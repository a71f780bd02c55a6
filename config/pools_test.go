package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

func TestPoolsConfig(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, "", nil)
		require.NoError(t, err)
		p := cfg.Pools
		require.Empty(t, p.Provisioner, "empty: the mode chooses")
		require.Equal(t, 5*time.Second, p.HeartbeatInterval)
		require.Equal(t, 3, p.OfflineHeartbeats)
		require.Equal(t, 15*time.Second, p.OfflineAfter())
		require.Equal(t, 3*time.Second, p.ReconcileInterval)
		require.Equal(t, time.Minute, p.DrainGrace)
		require.Equal(t, 5*time.Second, p.EvictGrace)
		require.NotEmpty(t, cfg.Path, "the file read is remembered for the local workers")
	})

	t.Run("YAMLAndEnv", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, "pools: {heartbeat_interval: 200ms, offline_heartbeats: 4, log_dir: /var/log/w}\n",
			map[string]string{"ORCH_POOLS_PROVISIONER": "external", "ORCH_WORKER_BINARY": "/opt/bin/worker"})
		require.NoError(t, err)
		require.Equal(t, config.ProvisionerExternal, cfg.Pools.Provisioner)
		require.Equal(t, "/opt/bin/worker", cfg.Pools.WorkerBinary)
		require.Equal(t, "/var/log/w", cfg.Pools.LogDir)
		require.Equal(t, 800*time.Millisecond, cfg.Pools.OfflineAfter())
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		_, err := load(t, "pools: {provisioner: kubernetes}\n", nil)
		require.ErrorContains(t, err, "pools.provisioner")
		_, err = load(t, "pools: {offline_heartbeats: 1}\n", nil)
		require.ErrorContains(t, err, "pools.offline_heartbeats")
		_, err = load(t, "pools: {evict_grace: -1s}\n", nil)
		require.ErrorContains(t, err, "pools.evict_grace")
	})
}
