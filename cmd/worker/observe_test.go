package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

func TestMetricsAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"Default", nil, nil, config.WorkerMetricsAddrDefault},
		{"Env", nil, map[string]string{"ORCH_WORKER_METRICS_ADDR": "0.0.0.0:9200"}, "0.0.0.0:9200"},
		{"FlagWins", []string{"--metrics-addr", "0"}, map[string]string{"ORCH_WORKER_METRICS_ADDR": "0.0.0.0:9200"}, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(k string) string { return tc.env[k] }
			f, err := parseFlags(tc.args, getenv, io.Discard)
			require.NoError(t, err)
			cfg, err := loadConfig(f, getenv)
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.Worker.MetricsAddr)
		})
	}
}

func TestObserveTakenPortIsNotFatal(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	cfg.Worker.MetricsAddr = ln.Addr().String()
	m, stop, err := observe(context.Background(), cfg, []*config.JobType{cfg.JobType("noop")}, slog.New(slog.DiscardHandler))
	require.NoError(t, err, "the worker runs without its endpoint")
	require.NotNil(t, m)
	stop()
}
