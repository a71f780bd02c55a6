package main

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

func poolsConfig(t *testing.T, env map[string]string) *config.Config {
	t.Helper()
	cfg, err := config.Load("", func(k string) string { return env[k] })
	require.NoError(t, err)
	return cfg
}

func TestStartPoolWorkProvisioner(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		embedded bool
		want     string
	}{
		{"EmbeddedDefaultsToLocal", nil, true, "local"},
		{"MariaDBDefaultsToExternal", nil, false, "external"},
		{"ExplicitLocalWithMariaDB", map[string]string{"ORCH_POOLS_PROVISIONER": "local"}, false, "local"},
		{"ExplicitExternalEmbedded", map[string]string{"ORCH_POOLS_PROVISIONER": "external"}, true, "external"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"ORCH_DATA_DIR": t.TempDir(), "ORCH_WORKER_BINARY": "/nonexistent/worker"}
			for k, v := range tc.env {
				env[k] = v
			}
			pw, err := startPoolWork(poolsConfig(t, env), nil, nil, nil, tc.embedded, log)
			require.NoError(t, err)
			require.Equal(t, tc.want, pw.prov.Name())
			if tc.want == "local" {
				require.DirExists(t, filepath.Join(env["ORCH_DATA_DIR"], config.PoolsLogDirName))
			}
		})
	}
}

func TestWorkerAPIURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr, want string
	}{
		{"127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"0.0.0.0:9000", "http://127.0.0.1:9000"},
		{":9000", "http://127.0.0.1:9000"},
		{"[::]:9000", "http://127.0.0.1:9000"},
		{"10.1.2.3:80", "http://10.1.2.3:80"},
	} {
		got, err := workerAPIURL(poolsConfig(t, map[string]string{"ORCH_HTTP_ADDR": tc.addr}))
		require.NoError(t, err)
		require.Equal(t, tc.want, got, tc.addr)
	}
	cfg := poolsConfig(t, nil)
	cfg.Pools.WorkerAPIURL = "https://orch.internal:8443"
	got, err := workerAPIURL(cfg)
	require.NoError(t, err)
	require.Equal(t, "https://orch.internal:8443", got, "the configured address wins")
	cfg.Pools.WorkerAPIURL, cfg.HTTPAddr = "", "no-port"
	_, err = workerAPIURL(cfg)
	require.ErrorContains(t, err, "pools.worker_api_url")
}
