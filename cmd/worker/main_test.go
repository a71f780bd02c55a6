package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/embedredis"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/worker"
)

// TestMain lets a test start this binary as the worker process (ORCH_TEST_RUN_MAIN=1).
func TestMain(m *testing.M) {
	if os.Getenv("ORCH_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"worker"}, os.Args[1:]...)
		main()
		return
	}
	os.Exit(m.Run())
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "orch.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return path
}

func TestResolveTypes(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `
job_types:
  echo: {handler: exec, command: echo}
  choose: {handler: exec}
  ghost: {handler: exec, command: ghost}
  remote: {handler: http}
  hook: {handler: http, url: "http://127.0.0.1:9/hook"}
  nothing: {handler: noop}
worker:
  commands:
    echo: {argv: [echo, hi]}
`)
	load := func(types string) *config.Config {
		cfg, err := loadConfig(flags{config: path, types: types}, func(string) string { return "" })
		require.NoError(t, err)
		return cfg
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := func(cfg *config.Config) *worker.Registry {
		return worker.NewBuiltinRegistry(worker.BuiltinOptions{JobTypes: cfg.JobTypes, Commands: cfg.Worker.Commands})
	}

	t.Run("DefaultSkipsWhatCannotRun", func(t *testing.T) {
		t.Parallel()
		cfg := load("")
		got, err := resolveTypes(cfg, reg(cfg), log)
		require.NoError(t, err)
		var names []string
		for _, ty := range got {
			names = append(names, ty.Name)
		}
		require.Equal(t, []string{"choose", "echo", "hook", "nothing"}, names)
	})

	t.Run("ExplicitTypesFailFast", func(t *testing.T) {
		t.Parallel()
		cfg := load("echo,remote,ghost")
		_, err := resolveTypes(cfg, reg(cfg), log)
		require.ErrorContains(t, err, "job type remote: http handler: the type has no url")
		require.ErrorContains(t, err, `job type ghost: exec handler: command "ghost" is not in worker.commands`)
	})

	t.Run("UnknownTypeFlag", func(t *testing.T) {
		t.Parallel()
		_, err := loadConfig(flags{config: path, types: "nope"}, func(string) string { return "" })
		require.ErrorContains(t, err, `unknown job type "nope"`)
	})
}

// fakeServer is a minimal orchestrator API: it claims every job and records completions.
type fakeServer struct {
	mu      sync.Mutex
	results []client.JobResult
	auth    string
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = r.Header.Get("Authorization")
	switch r.URL.Path {
	case "/internal/jobs/claim":
		var req client.ClaimRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		var resp client.ClaimResponse
		for _, it := range req.Jobs {
			resp.Claimed = append(resp.Claimed, client.ClaimedJob{JobID: it.JobID, Payload: json.RawMessage(`{}`), Attempt: 1})
		}
		_ = json.NewEncoder(w).Encode(resp)
	case "/internal/jobs/start":
		_ = json.NewEncoder(w).Encode(client.StartResponse{})
	case "/internal/jobs/complete":
		var req client.CompleteRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.results = append(f.results, req.Results...)
		_ = json.NewEncoder(w).Encode(client.CompleteResponse{})
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeServer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.results)
}

func startWorker(t *testing.T, env []string, args ...string) (*exec.Cmd, *testenv.SyncBuffer, chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), append(env, "ORCH_TEST_RUN_MAIN=1")...)
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, out, done
}

func waitExit(t *testing.T, done chan error, out *testenv.SyncBuffer) int {
	t.Helper()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err, out.String())
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("worker did not exit; output:\n%s", out.String())
		return -1
	}
}

func TestWorkerProcess(t *testing.T) {
	t.Parallel()
	redisAddr := testenv.RedisAddr(t)

	t.Run("RunsJobsAndStopsOnSIGTERM", func(t *testing.T) {
		t.Parallel()
		typ := fmt.Sprintf("smoke_%x", rand.Uint32())
		api := &fakeServer{}
		srv := httptest.NewServer(api)
		t.Cleanup(srv.Close)
		rdb := streams.NewRedis(redisAddr, "")
		t.Cleanup(func() { _ = rdb.Close() })
		sc := streams.New(rdb, streams.Options{})
		t.Cleanup(func() { rdb.Del(context.Background(), sc.StreamKey(typ)) })
		_, err := sc.Publish(context.Background(), []streams.Message{{Stream: typ, JobID: "j1", Type: typ}})
		require.NoError(t, err)

		path := writeConfig(t, fmt.Sprintf("job_types:\n  %s: {handler: noop}\nworker:\n  block: 50ms\n", typ))
		cmd, out, done := startWorker(t, []string{"ORCH_REDIS_ADDR=" + redisAddr, "ORCH_API_URL=" + srv.URL,
			"ORCH_API_TOKEN=tok", "ORCH_LOG_LEVEL=debug"}, "--config", path, "--types", typ, "--id", "w-smoke")
		if !assert.Eventually(t, func() bool { return api.count() == 1 }, 20*time.Second, 10*time.Millisecond) {
			t.Fatalf("no result reported; worker output:\n%s", out.String())
		}
		if testing.Verbose() {
			defer func() { t.Logf("worker output:\n%s", out.String()) }()
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, waitExit(t, done, out), out.String())
		n, err := sc.PendingCount(context.Background(), typ, streams.GroupName(typ))
		require.NoError(t, err)
		require.Zero(t, n)
		api.mu.Lock()
		defer api.mu.Unlock()
		require.Equal(t, "Bearer tok", api.auth)
		require.Equal(t, client.ResultDone, api.results[0].Status)
	})

	t.Run("WaitsForRedisAtStart", func(t *testing.T) {
		// A worker started while Redis is out of reach waits for it instead of exiting.
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close()) // nothing listens there until the server below starts
		api := &fakeServer{}
		srv := httptest.NewServer(api)
		t.Cleanup(srv.Close)
		path := writeConfig(t, "job_types:\n  late: {handler: noop}\nworker:\n  block: 50ms\n")
		cmd, out, done := startWorker(t, []string{"ORCH_REDIS_ADDR=" + addr, "ORCH_API_URL=" + srv.URL,
			"ORCH_API_TOKEN=tok"}, "--config", path, "--types", "late", "--id", "w-late")
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "redis not reachable, retrying") },
			20*time.Second, 10*time.Millisecond, "output:\n%s", out)

		late, err := embedredis.Start(addr)
		require.NoError(t, err)
		t.Cleanup(late.Close)
		rdb := streams.NewRedis(addr, "")
		t.Cleanup(func() { _ = rdb.Close() })
		_, err = streams.New(rdb, streams.Options{}).Publish(context.Background(), []streams.Message{{Stream: "late", JobID: "j1", Type: "late"}})
		require.NoError(t, err)
		if !assert.Eventually(t, func() bool { return api.count() == 1 }, 30*time.Second, 10*time.Millisecond) {
			t.Fatalf("no result reported; worker output:\n%s", out.String())
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, waitExit(t, done, out), out.String())
	})

	t.Run("StartupErrorExitsNonZero", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "job_types:\n  run: {handler: exec, command: missing}\nworker:\n  types: [run]\n")
		_, out, done := startWorker(t, []string{"ORCH_REDIS_ADDR=" + redisAddr}, "--config", path)
		require.Equal(t, 1, waitExit(t, done, out))
		require.Contains(t, out.String(), `command "missing" is not in worker.commands`)
	})

	t.Run("BadFlag", func(t *testing.T) {
		t.Parallel()
		_, out, done := startWorker(t, nil, "--nope")
		require.Equal(t, 2, waitExit(t, done, out))
	})
}
