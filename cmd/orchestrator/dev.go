package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/worker"
)

func devCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Run the orchestrator with an in-process worker pool, for development and single hosts",
		Long: "dev runs everything serve runs plus an in-process worker serving every job type whose " +
			"handler can run here, with text logs. When no API token is configured it admits requests " +
			"from loopback without a token (and says so), so it refuses to listen on other addresses then.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if os.Getenv("ORCH_LOG_FORMAT") == "" {
				cfg.LogFormat = "text"
			}
			if err := requireLoopback(cfg.HTTPAddr); err != nil && os.Getenv("ORCH_TOKENS_FILE") == "" && cfg.TokensFile == "" {
				return err
			}
			log := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runServer(ctx, cfg, log, serverOptions{
				allowLoopback: true,
				ready: func(ctx context.Context, eng *engine.Engine, addr string) (func(), error) {
					w, types, err := devWorker(cfg, eng, addr)
					if err != nil {
						return nil, err
					}
					printBanner(cmd, cfg, addr, types)
					done := make(chan struct{})
					go func() {
						defer close(done)
						if err := w.Run(ctx); err != nil {
							log.Error("in-process worker stopped", "error", err)
						}
					}()
					return func() { <-done }, nil
				},
			})
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

// devWorker builds the in-process worker: it talks to this process's API over loopback, like
// any worker, and serves every type whose handler can run with the configuration.
func devWorker(cfg *config.Config, eng *engine.Engine, addr string) (*worker.Worker, []string, error) {
	reg := worker.NewBuiltinRegistry(worker.BuiltinOptions{JobTypes: cfg.JobTypes, Commands: cfg.Worker.Commands})
	var types []*config.JobType
	var names []string
	for _, name := range cfg.TypeNames() {
		jt := cfg.JobTypes[name]
		if len(cfg.Worker.Types) > 0 && !contains(cfg.Worker.Types, name) {
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
	w, err := worker.New(worker.Config{
		WorkerID:    "dev-" + cfg.NodeID,
		PoolID:      "dev",
		NodeID:      cfg.NodeID,
		Types:       types,
		Concurrency: cfg.Worker.Concurrency,
		Batch:       cfg.Worker.Batch,
		Block:       cfg.Worker.Block,
		API:         client.New("http://"+addr, cfg.Worker.APIToken),
		Streams:     eng.Streams(),
		Registry:    reg,
		Logger:      logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat),
	})
	return w, names, err
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func printBanner(cmd *cobra.Command, cfg *config.Config, addr string, types []string) {
	out := cmd.ErrOrStderr()
	fmt.Fprintf(out, `
  GPU Orchestrator (dev) is up
    API:          http://%s
    job types:    %v (served by an in-process worker)
    MariaDB:      %s
    Redis:        %s

  Try it:
    curl -s -X POST http://%s/jobs/submit -H 'Content-Type: application/json' \
         -d '{"type":"sleep","agent":"demo","payload":{"ms":500}}'
    ./bin/orchctl jobs list

  Ctrl-C drains in-flight jobs and exits.

`, addr, types, redactDSN(cfg.MySQLDSN), cfg.RedisAddr, addr)
}

// redactDSN hides a password in a DSN before it is printed.
func redactDSN(dsn string) string {
	at := -1
	for i := len(dsn) - 1; i >= 0; i-- {
		if dsn[i] == '@' {
			at = i
			break
		}
	}
	if at < 0 {
		return dsn
	}
	for i := 0; i < at; i++ {
		if dsn[i] == ':' {
			return dsn[:i] + ":****" + dsn[at:]
		}
	}
	return dsn
}
