// Command worker is the pool worker process: it serves the job types of its configuration (or
// of --types), running each job with the handler its type names, until SIGTERM or SIGINT asks
// it to drain. A second signal exits at once.
//
// Configuration comes from the YAML file of --config or ORCH_CONFIG, with ORCH_* environment
// overrides (see package config); the flags override both. Exit status: 0 after a graceful
// stop, 1 on a startup error, 2 on bad flags, 130 on a second signal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/tracing"
	"github.com/gpuorch/orchestrator/worker"
)

// Startup: a worker started while Redis is out of reach (restarting, failing over, a hung
// server) waits for it, pinging with backoff, rather than exiting: what starts it (a
// Deployment, systemd) would only start it again.
const (
	// redisPingTimeout bounds one ping.
	redisPingTimeout = 5 * time.Second
	// redisStartupWait is how long the worker waits for Redis at start before it gives up.
	redisStartupWait = 2 * time.Minute
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigs
		slog.Info("signal received; draining (send again to exit at once)", "component", "worker", "signal", s.String())
		cancel()
		s = <-sigs
		slog.Warn("second signal; exiting without draining", "component", "worker", "signal", s.String())
		os.Exit(130)
	}()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stderr))
}

// flags are the command-line overrides of the configuration.
type flags struct {
	config      string
	types       string
	concurrency int
	id          string
	pool        string
	metricsAddr string
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", getenv("ORCH_CONFIG"), "YAML configuration file (default $ORCH_CONFIG)")
	fs.StringVar(&f.types, "types", "", "comma-separated job types to serve (overrides worker.types)")
	fs.IntVar(&f.concurrency, "concurrency", 0, "jobs run at once (overrides worker.concurrency)")
	fs.StringVar(&f.id, "id", "", "worker id (overrides worker.id)")
	fs.StringVar(&f.pool, "pool", "", "pool id (overrides worker.pool_id)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "host:port of GET /metrics, 0 to disable (overrides worker.metrics_addr; default "+config.WorkerMetricsAddrDefault+")")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return f, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return f, nil
}

// run starts the worker and blocks until ctx ends and the worker has drained. It returns the
// process's exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	f, err := parseFlags(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "worker:", err)
		return 2
	}
	cfg, err := loadConfig(f, getenv)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return 1
	}
	log := tracing.WithLogs(newLogger(cfg, stderr)) // trace_id on records logged with a span
	slog.SetDefault(log)
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("worker failed", "component", "worker", "error", err)
		fmt.Fprintln(stderr, "worker:", err)
		return 1
	}
	return 0
}

// loadConfig loads the configuration and applies the flags on top.
func loadConfig(f flags, getenv func(string) string) (*config.Config, error) {
	cfg, err := config.Load(f.config, getenv)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	if f.types != "" {
		cfg.Worker.Types = nil
		for _, t := range strings.Split(f.types, ",") {
			if t = strings.TrimSpace(t); t != "" {
				cfg.Worker.Types = append(cfg.Worker.Types, t)
			}
		}
	}
	if f.concurrency != 0 {
		cfg.Worker.Concurrency = f.concurrency
	}
	if f.id != "" {
		cfg.Worker.ID = f.id
	}
	if f.pool != "" {
		cfg.Worker.PoolID = f.pool
	}
	if f.metricsAddr != "" {
		cfg.Worker.MetricsAddr = f.metricsAddr
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("check flags: %w", err)
	}
	return cfg, nil
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// resolveTypes picks the types to serve. Types named in worker.types (or --types) must all be
// runnable here, else the worker refuses to start; without a list, every configured type whose
// handler can run is served and the others are skipped with an info log.
func resolveTypes(cfg *config.Config, reg *worker.Registry, log *slog.Logger) ([]*config.JobType, error) {
	var out []*config.JobType
	if len(cfg.Worker.Types) > 0 {
		var errs []error
		for _, name := range cfg.Worker.Types {
			t := cfg.JobType(name)
			if t == nil {
				errs = append(errs, fmt.Errorf("job type %q is not configured", name))
				continue
			}
			if err := reg.CheckType(t); err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, t)
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("resolve served types: %w", err)
		}
		return out, nil
	}
	for _, name := range cfg.TypeNames() {
		t := cfg.JobType(name)
		if err := reg.CheckType(t); err != nil {
			log.Info("not serving job type: its handler cannot run here", "component", "worker",
				"job_type", name, "reason", err.Error())
			continue
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("resolve served types: no configured job type can run in this worker")
	}
	return out, nil
}

// serve wires the worker and runs it until ctx ends.
func serve(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	reg := worker.NewBuiltinRegistry(worker.BuiltinOptions{
		JobTypes: cfg.JobTypes, Commands: cfg.Worker.Commands, Logger: log,
	})
	types, err := resolveTypes(cfg, reg, log)
	if err != nil {
		return err
	}
	rdb := streams.NewRedis(cfg.RedisAddr, cfg.RedisPassword)
	defer func() { _ = rdb.Close() }() // at exit: closing only frees connections
	sc := streams.New(rdb, streams.Options{Prefix: cfg.RedisPrefix})
	if err := waitForRedis(ctx, sc, cfg.RedisAddr, log); err != nil {
		return err
	}
	// The node's GPUs, reported with every lease renewal; GPU jobs are placed by them.
	gpus, err := telemetry.Auto(cfg.NodeID, telemetry.AutoOptions{
		SimGPUs: cfg.Telemetry.SimGPUs,
		Disable: cfg.Telemetry.NVMLDisable,
		NVML:    telemetry.NVMLOptions{LibraryPath: cfg.Telemetry.NVMLLibrary, Logger: log},
		Logger:  log,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := gpus.Close(); err != nil {
			log.Warn("close GPU telemetry", "error", err)
		}
	}()
	metrics, stopObserving, err := observe(ctx, cfg, types, log)
	if err != nil {
		return err
	}
	defer stopObserving()
	tlsCfg, err := client.TLSConfig(cfg.TLS.CAFile, cfg.TLS.ClientCertFile, cfg.TLS.ClientKeyFile)
	if err != nil {
		return err
	}
	api := client.New(cfg.Worker.APIURL, cfg.Worker.APIToken, client.WithUserAgent("gpuorch-worker/"+cfg.Worker.ID),
		client.WithTLSConfig(tlsCfg))
	var preload worker.Preloader
	if name := cfg.Worker.Preload; name != "" {
		preload = worker.PreloadCommand(cfg.Worker.Commands[name], cfg.Worker.PoolID)
	}
	w, err := worker.New(worker.Config{
		WorkerID:          cfg.Worker.ID,
		PoolID:            cfg.Worker.PoolID,
		Preload:           preload,
		ModelID:           cfg.Worker.ModelID,
		NodeID:            cfg.NodeID,
		NodeLabels:        cfg.NodeLabels,
		Types:             types,
		Concurrency:       cfg.Worker.Concurrency,
		Batch:             cfg.Worker.Batch,
		Block:             cfg.Worker.Block,
		API:               api,
		Streams:           sc,
		Registry:          reg,
		Logger:            log,
		ShutdownGrace:     cfg.ShutdownGrace,
		TouchInterval:     cfg.ClaimIdle / 3,
		LeaseTTL:          cfg.Leases.TTL,
		Telemetry:         gpus,
		TelemetryInterval: cfg.Telemetry.PollInterval,
		Metrics:           metrics,
		Registrar:         api,
		HeartbeatInterval: cfg.Pools.HeartbeatInterval,
		PreRun:            api,
		PreRunTypes:       slices.Sorted(maps.Keys(cfg.Webhooks.PreRun)),
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// waitForRedis pings Redis until it answers, with capped, jittered backoff, for at most
// redisStartupWait.
func waitForRedis(ctx context.Context, sc *streams.Client, addr string, log *slog.Logger) error {
	deadline := time.Now().Add(redisStartupWait)
	delay := 250 * time.Millisecond
	for {
		pingCtx, cancel := context.WithTimeout(ctx, redisPingTimeout)
		err := sc.Ping(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("connect to redis at %s: %w", addr, err)
		}
		log.Warn("redis not reachable, retrying", "component", "worker", "redis_addr", addr, "error", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(startstop.Jitter(delay, 0.2)):
		}
		delay = min(2*delay, 5*time.Second)
	}
}
