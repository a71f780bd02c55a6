// Command peers runs the orchestrator bench's burndown, streaming and latency
// scenarios on asynq (Redis) and River (Postgres) on this machine, so the
// reference figures the project compares against can be measured next to its
// own, under the same load and on the same hardware.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

type config struct {
	systems     []string
	scenarios   []string
	n           int
	concurrency int
	producers   int
	rate        int
	duration    time.Duration
	timeout     time.Duration
	out         string
	redisAddr   string
	redisDB     int
	pgURL       string

	// Polling knobs, 0 = the library's default (the reference runs use the defaults).
	asynqTaskCheck    time.Duration
	riverFetchCool    time.Duration
	riverFetchPollInt time.Duration
}

// Report is the JSON written to stdout and -out.
type Report struct {
	StartedAt  time.Time                    `json:"started_at"`
	FinishedAt time.Time                    `json:"finished_at"`
	Machine    Machine                      `json:"machine"`
	LoadAvgEnd string                       `json:"load_avg_end"`
	Command    string                       `json:"command"`
	Config     map[string]any               `json:"config"`
	Versions   map[string]string            `json:"versions"`
	Results    map[string]map[string]Result `json:"results"`
	Errors     []string                     `json:"errors,omitempty"`
}

func main() {
	var cfg config
	var systems, scenarios string
	flag.StringVar(&systems, "system", "all", "asynq, river or all")
	flag.StringVar(&scenarios, "scenarios", "burndown,streaming,latency", "scenarios, in order")
	flag.IntVar(&cfg.n, "n", 20000, "jobs of burndown and streaming")
	flag.IntVar(&cfg.concurrency, "concurrency", 50, "asynq Concurrency / River MaxWorkers")
	flag.IntVar(&cfg.producers, "producers", 8, "closed-loop inserters (streaming; asynq's burndown fill)")
	flag.IntVar(&cfg.rate, "rate", 1000, "latency: offered inserts per second")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "latency: how long the rate is offered")
	flag.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "how long a scenario waits for its jobs after the inserts")
	flag.StringVar(&cfg.out, "out", "", "also write the JSON report to this file (default: gpu-orchestrator/bench/peers-<start>.json in $XDG_CACHE_HOME, else ~/.cache, else the temporary directory)")
	flag.StringVar(&cfg.redisAddr, "redis-addr", "127.0.0.1:6379", "Redis for asynq")
	flag.IntVar(&cfg.redisDB, "redis-db", 15, "Redis DB for asynq, flushed before and after (never 0)")
	flag.StringVar(&cfg.pgURL, "pg-url", "postgres://postgres@127.0.0.1:5432/test", "Postgres for River: a fresh database is created beside this one and dropped")
	flag.DurationVar(&cfg.asynqTaskCheck, "asynq-task-check-interval", 0, "asynq Config.TaskCheckInterval (0: asynq's default, 1s: an idle processor sleeps 0.5-1.5 s)")
	flag.DurationVar(&cfg.riverFetchCool, "river-fetch-cooldown", 0, "River Config.FetchCooldown (0: River's default, 100ms)")
	flag.DurationVar(&cfg.riverFetchPollInt, "river-fetch-poll-interval", 0, "River Config.FetchPollInterval (0: River's default, 1s)")
	flag.Parse()
	if systems == "all" {
		systems = "asynq,river"
	}
	cfg.systems = strings.Split(systems, ",")
	cfg.scenarios = strings.Split(scenarios, ",")
	if cfg.rate <= 0 || cfg.n <= 0 || cfg.concurrency <= 0 || cfg.producers <= 0 {
		fatalf("-n, -rate, -concurrency and -producers must be positive")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	rep := Report{
		StartedAt: time.Now().UTC(),
		Machine:   machine(),
		Command:   strings.Join(os.Args, " "),
		Config: map[string]any{
			"system": cfg.systems, "scenarios": cfg.scenarios, "n": cfg.n, "concurrency": cfg.concurrency,
			"producers": cfg.producers, "rate": cfg.rate, "duration": cfg.duration.String(),
			"redis_addr": cfg.redisAddr, "redis_db": cfg.redisDB,
			"asynq_task_check_interval": cfg.asynqTaskCheck.String(),
			"river_fetch_cooldown":      cfg.riverFetchCool.String(),
			"river_fetch_poll_interval": cfg.riverFetchPollInt.String(),
		},
		Versions: versions(),
		Results:  map[string]map[string]Result{},
	}
	failed := false
	for _, name := range cfg.systems {
		if err := runSystem(ctx, name, cfg, &rep); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", name, err))
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			failed = true
		}
	}
	rep.FinishedAt = time.Now().UTC()
	rep.LoadAvgEnd = loadAvg()

	data, _ := json.MarshalIndent(rep, "", "  ")
	os.Stdout.Write(append(data, '\n'))
	out := reportPath(cfg.out, rep.StartedAt)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		fatalf("write %s: %v", out, err)
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		fatalf("write %s: %v", out, err)
	}
	fmt.Fprintf(os.Stderr, "report written to %s\n", out)
	summary(os.Stderr, &rep)
	if failed {
		os.Exit(1)
	}
}

// reportPath is where the report of a run started at started goes: out when given, else
// gpu-orchestrator/bench/peers-<start, UTC>.json in the user's cache directory
// ($XDG_CACHE_HOME, else ~/.cache on Linux), else in the temporary directory; never the
// working directory, so a run from a checkout leaves no result in the tree.
func reportPath(out string, started time.Time) string {
	if out != "" {
		return out
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	name := "peers-" + started.UTC().Format("20060102T150405Z") + ".json"
	return filepath.Join(dir, "gpu-orchestrator", "bench", name)
}

func runSystem(ctx context.Context, name string, cfg config, rep *Report) (err error) {
	var s system
	switch name {
	case "asynq":
		s, err = newAsynq(ctx, cfg)
	case "river":
		s, err = newRiver(ctx, cfg)
	default:
		return fmt.Errorf("unknown system %q (asynq, river, all)", name)
	}
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = cerr
		}
	}()
	rep.Results[name] = map[string]Result{}
	for _, sc := range cfg.scenarios {
		var run func(context.Context, system, config) (Result, error)
		switch sc {
		case "burndown":
			run = burndown
		case "streaming":
			run = streaming
		case "latency":
			run = latency
		default:
			return fmt.Errorf("unknown scenario %q", sc)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "%s %s: running (load %s)\n", name, sc, loadAvg())
		res, err := run(ctx, s, cfg)
		if err != nil {
			res.Error = err.Error()
		}
		rep.Results[name][sc] = res
		fmt.Fprintf(os.Stderr, "%s %s: %s\n", name, sc, line(res))
		if err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
	}
	return nil
}

func line(r Result) string {
	s := fmt.Sprintf("%d/%d jobs in %.3f s = %.0f jobs/s", r.Jobs, r.Expected, r.Seconds, r.JobsPerSec)
	if r.InsertPerSec > 0 {
		s += fmt.Sprintf(" (inserts %.0f/s)", r.InsertPerSec)
	}
	if r.LatencyMs != nil {
		s += fmt.Sprintf("; insert->start ms p50 %.2f p90 %.2f p99 %.2f max %.2f",
			r.LatencyMs.P50, r.LatencyMs.P90, r.LatencyMs.P99, r.LatencyMs.Max)
	}
	if r.TimedOut {
		s += " TIMED OUT"
	}
	if r.Error != "" {
		s += " error: " + r.Error
	}
	return s
}

func summary(w *os.File, rep *Report) {
	fmt.Fprintf(w, "\n%d cpus (%s), load %s -> %s\n", rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.LoadAvg, rep.LoadAvgEnd)
	for _, sys := range []string{"asynq", "river"} {
		res, ok := rep.Results[sys]
		if !ok {
			continue
		}
		for _, sc := range []string{"burndown", "streaming", "latency"} {
			if r, ok := res[sc]; ok {
				fmt.Fprintf(w, "%-6s %-9s %s\n", sys, sc, line(r))
			}
		}
	}
}

// versions of the peers as built into this binary.
func versions() map[string]string {
	v := map[string]string{"go": runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/hibiken/asynq", "github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riverpgxv5",
			"github.com/jackc/pgx/v5", "github.com/redis/go-redis/v9":
			v[d.Path] = d.Version
		}
	}
	return v
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "peers: "+format+"\n", a...)
	os.Exit(2)
}
