package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/worker"
)

// DevSimGPUsDefault is the simulated GPUs of dev mode when ORCH_SIM_GPUS is not set: two
// 24 GiB cards, so that GPU job types can be tried on a laptop. NVML, when present, wins.
const DevSimGPUsDefault = "2x24576"

// devPoolID is the pool of dev mode's in-process worker.
const devPoolID = "local"

func devCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Run a complete single-node orchestrator with nothing installed: SQLite, in-process Redis and workers",
		Long: "dev runs the embedded single-node mode: the API, the engine, a SQLite database in " +
			"data_dir (ORCH_DATA_DIR, default ./data), an in-process Redis on embedded_redis_addr " +
			"(ORCH_EMBEDDED_REDIS_ADDR, default 127.0.0.1:6390), and an in-process worker serving " +
			"every job type whose handler can run here, with simulated GPUs when NVML has none " +
			"(ORCH_SIM_GPUS, default " + DevSimGPUsDefault + ") and text logs. A second orchestrator " +
			"on the same data directory refuses to start. Ctrl-C drains in-flight jobs (for up to " +
			"shutdown_grace), a second Ctrl-C stops at once; a restart resumes every unfinished job.\n\nWhen no API token is configured it admits requests " +
			"from loopback without a token (and says so), so it refuses to listen on other addresses then; " +
			"a tokens file (tokens_file, ORCH_TOKENS_FILE) or ORCH_API_TOKENS that holds no token is refused.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, set := os.LookupEnv("ORCH_SIM_GPUS"); !set {
				// Before the configuration is read, so that it and every child process see it.
				_ = os.Setenv("ORCH_SIM_GPUS", DevSimGPUsDefault)
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if os.Getenv("ORCH_LOG_FORMAT") == "" {
				cfg.LogFormat = "text"
			}
			log := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat)
			ctx, stop := shutdownOnSignal(cmd.Context(), log, cfg.ShutdownGrace, os.Exit)
			defer stop()
			return runServer(ctx, cfg, log, devOptions(cfg, log, cmd.ErrOrStderr()))
		},
	}
}

// devOptions are the serverOptions of dev mode: tokenless when no token is configured, the
// embedded backends, and, once the API listens, the banner (on out) and the in-process worker.
func devOptions(cfg *config.Config, log *slog.Logger, out io.Writer) serverOptions {
	return serverOptions{
		allowLoopback: true,
		open:          embeddedOpener(func(cfg *config.Config) []string { return []string{devWorkerID(cfg)} }),
		ready: func(ctx context.Context, c *core, self selfAPI) (func(), error) {
			w, types, err := devWorker(cfg, c.sc, self)
			if err != nil {
				return nil, err
			}
			printBanner(out, cfg, self.url, types)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := w.Run(ctx); err != nil {
					log.Error("in-process worker stopped", "error", err)
				}
			}()
			return func() { <-done }, nil
		},
	}
}

// requireLoopback refuses a non-loopback listen address for unauthenticated dev mode.
func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("http_addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("dev mode without API tokens listens on loopback only, not %s: set ORCH_HTTP_ADDR=127.0.0.1:8080 or configure tokens", addr)
}

// devWorkerID names dev mode's in-process worker. It is stable across restarts of one node, so
// that a restart recognises the jobs the previous process's worker held (see embeddedOpener).
func devWorkerID(cfg *config.Config) string { return "dev-" + cfg.NodeID }

// devWorker builds the in-process worker: it talks to this process's API over loopback, like
// any worker (over HTTPS, trusting the certificate this process serves, when the API serves
// TLS), and serves every type whose handler can run with the configuration (or those of
// worker.types when set).
func devWorker(cfg *config.Config, sc *streams.Client, self selfAPI) (*worker.Worker, []string, error) {
	reg := worker.NewBuiltinRegistry(worker.BuiltinOptions{JobTypes: cfg.JobTypes, Commands: cfg.Worker.Commands})
	var types []*config.JobType
	var names []string
	for _, name := range cfg.TypeNames() {
		jt := cfg.JobTypes[name]
		if len(cfg.Worker.Types) > 0 && !slices.Contains(cfg.Worker.Types, name) {
			continue
		}
		if reg.CheckType(jt) != nil {
			continue
		}
		types = append(types, jt)
		names = append(names, name)
	}
	if len(types) == 0 {
		return nil, nil, fmt.Errorf("dev: no job type can run in the in-process worker")
	}
	api := client.New(self.url, cfg.Worker.APIToken, client.WithTLSConfig(self.tls))
	w, err := worker.New(worker.Config{
		WorkerID:      devWorkerID(cfg),
		PoolID:        devPoolID,
		NodeID:        cfg.NodeID,
		NodeLabels:    cfg.NodeLabels,
		Types:         types,
		Concurrency:   cfg.Worker.Concurrency,
		Batch:         cfg.Worker.Batch,
		Block:         cfg.Worker.Block,
		ShutdownGrace: cfg.ShutdownGrace,
		API:           api,
		Streams:       sc,
		Registry:      reg,
		Logger:        logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat),
		// Registered like any worker: the scheduler places GPU jobs on the nodes of the live
		// workers of their type.
		Registrar:         api,
		HeartbeatInterval: cfg.Pools.HeartbeatInterval,
		PreRun:            api,
		PreRunTypes:       slices.Sorted(maps.Keys(cfg.Webhooks.PreRun)),
	})
	return w, names, err
}

// printBanner tells the user where everything is and how to submit a first job. apiURL is the
// API's base URL (http://127.0.0.1:8080).
func printBanner(out io.Writer, cfg *config.Config, apiURL string, types []string) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		dataDir = cfg.DataDir
	}
	example := "sleep"
	if !slices.Contains(types, example) {
		example = types[0]
	}
	gpus := "simulated " + cfg.Telemetry.SimGPUs + " (ORCH_SIM_GPUS) unless NVML finds GPUs"
	if cfg.Telemetry.SimGPUs == "" {
		gpus = "NVML when present, otherwise none (CPU jobs only)"
	}
	fmt.Fprintf(out, `
  GPU Orchestrator (embedded single-node mode) is up
    API:          %[1]s
    data:         %[2]s  (SQLite %[3]s; ORCH_DATA_DIR)
    Redis:        %[4]s  (in-process; ORCH_EMBEDDED_REDIS_ADDR)
    workers:      in-process pool %[5]q serving %[6]v
    GPUs:         %[7]s

  Try it:
    ./bin/orchctl --api-url %[1]s jobs submit --type %[8]s --agent demo --payload '{"ms": 500}' --wait
    curl -s -X POST %[1]s/jobs/submit -H 'Content-Type: application/json' \
         -d '{"type":"%[8]s","agent":"demo","payload":{"ms":500}}'
    ./bin/orchctl --api-url %[1]s jobs list

  Ctrl-C drains in-flight jobs (for up to %[9]s, shutdown_grace) and exits; a second Ctrl-C
  stops at once. Starting again resumes every unfinished job.

`, apiURL, dataDir, sqlite.DBFileName, cfg.RedisAddr, devPoolID, types, gpus, example, cfg.ShutdownGrace)
}
