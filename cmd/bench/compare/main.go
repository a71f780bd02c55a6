// Command compare runs the orchestrator's bench and its peers (asynq and River, cmd/bench/peers)
// back to back on this machine, on the same load, and prints one table of the three scenarios
// they share (burndown, streaming, latency) with the orchestrator's ratio to each peer. asynq
// runs twice: on the machine's Redis as it is, and on a Redis started here with appendfsync
// always, the durability the orchestrator and River give (every job on disk before its
// answer). make bench-compare runs it; the reports of the three runs and the table go to a
// JSON file outside the tree (printed at the end).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the flags.
type options struct {
	n, producers          int
	rate                  float64
	duration, timeout     time.Duration
	asynqCheck            time.Duration
	riverCooldown         time.Duration
	riverPoll             time.Duration
	redisServer, peersDir string
	out, benchFlags       string
	skipFsync, skipPeers  bool
}

func main() {
	o := options{}
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	fs.IntVar(&o.n, "n", 20000, "jobs of burndown and streaming")
	fs.IntVar(&o.producers, "producers", 8, "closed-loop submitters (streaming, and the burndown fill)")
	fs.Float64Var(&o.rate, "rate", 1000, "latency: offered jobs per second")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "latency: how long the rate is offered")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "the whole comparison's deadline")
	fs.DurationVar(&o.asynqCheck, "asynq-task-check-interval", 10*time.Millisecond, "asynq's TaskCheckInterval (its default, 1 s, makes its latency hundreds of ms)")
	fs.DurationVar(&o.riverCooldown, "river-fetch-cooldown", 5*time.Millisecond, "River's FetchCooldown (its default, 100 ms, caps a queue at 50 workers per 100 ms)")
	fs.DurationVar(&o.riverPoll, "river-fetch-poll-interval", 20*time.Millisecond, "River's FetchPollInterval")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "the redis-server program that asynq's fsync-always run starts on a free port")
	fs.StringVar(&o.peersDir, "peers", "cmd/bench/peers", "the peers module's directory")
	fs.StringVar(&o.benchFlags, "bench-flags", "", "extra flags for the orchestrator's bench (space-separated)")
	fs.StringVar(&o.out, "out", "", "the combined JSON report (default: gpu-orchestrator/bench/compare-<start>.json in the user's cache directory)")
	fs.BoolVar(&o.skipFsync, "no-fsync-run", false, "skip asynq on an appendfsync-always Redis")
	fs.BoolVar(&o.skipPeers, "no-peers", false, "run the orchestrator's bench only")
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// combined is the report compare writes.
type combined struct {
	StartedAt  time.Time                  `json:"started_at"`
	FinishedAt time.Time                  `json:"finished_at"`
	Commands   []string                   `json:"commands"`
	Table      []row                      `json:"table"`
	Reports    map[string]json.RawMessage `json:"reports"`
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	started := time.Now()
	tmp, err := os.MkdirTemp("", "bench-compare-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	out := combined{StartedAt: started, Reports: map[string]json.RawMessage{}}
	load := []string{"-n", strconv.Itoa(o.n), "-producers", strconv.Itoa(o.producers),
		"-rate", strconv.FormatFloat(o.rate, 'f', -1, 64), "-duration", o.duration.String()}
	peers := append(slicesClone(load), "-asynq-task-check-interval", o.asynqCheck.String(),
		"-river-fetch-cooldown", o.riverCooldown.String(), "-river-fetch-poll-interval", o.riverPoll.String())

	step := func(name, dir string, args ...string) error {
		report := filepath.Join(tmp, name+".json")
		args = append(args, "-out", report)
		out.Commands = append(out.Commands, fmt.Sprintf("(cd %s && go run %s)", dir, strings.Join(args, " ")))
		fmt.Fprintf(os.Stderr, "compare: %s: go run %s\n", name, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, "go", append([]string{"run"}, args...)...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, io.Discard, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		raw, err := os.ReadFile(report)
		if err != nil {
			return fmt.Errorf("%s: read its report: %w", name, err)
		}
		out.Reports[name] = raw
		return nil
	}
	bench := append([]string{"./cmd/bench", "-scenarios", "burndown,streaming,latency"}, load...)
	bench = append(bench, strings.Fields(o.benchFlags)...)
	if err := step("orchestrator", ".", bench...); err != nil {
		return err
	}
	if !o.skipPeers {
		if err := step("peers", o.peersDir, append([]string{".", "-system", "all"}, peers...)...); err != nil {
			return err
		}
		if !o.skipFsync {
			addr, stopRedis, err := startFsyncRedis(ctx, o.redisServer, tmp)
			if err != nil {
				return err
			}
			err = step("asynq_fsync", o.peersDir, append([]string{".", "-system", "asynq", "-redis-addr", addr}, peers...)...)
			stopRedis()
			if err != nil {
				return err
			}
		}
	}
	if out.Table, err = table(out.Reports); err != nil {
		return err
	}
	out.FinishedAt = time.Now()
	printTable(stdout, out.Table)
	path := reportPath(o.out, started)
	raw, _ := json.MarshalIndent(out, "", "  ")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "compare: report written to", path)
	return nil
}

// startFsyncRedis starts a Redis on a free loopback port that fsyncs every write
// (appendfsync always), its files in dir, and returns its address and how to stop it.
func startFsyncRedis(ctx context.Context, program, dir string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.CommandContext(ctx, program, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--dir", dir)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s (appendfsync always): %w", program, err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis (appendfsync always) on %s did not come up: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // waiting for a child process to listen
	}
}

// reportPath is out, or compare-<start>.json beside the bench's reports in the user's cache
// directory: never the working tree.
func reportPath(out string, started time.Time) string {
	if out != "" {
		return out
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "gpu-orchestrator", "bench", "compare-"+started.UTC().Format("20060102T150405Z")+".json")
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
