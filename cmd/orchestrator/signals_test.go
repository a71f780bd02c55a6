package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/internal/testenv"
)

// TestMain lets a test start this binary as the orchestrator process (ORCH_TEST_RUN_MAIN=1).
func TestMain(m *testing.M) {
	if os.Getenv("ORCH_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"orchestrator"}, os.Args[1:]...)
		main()
		return
	}
	os.Exit(m.Run())
}

// freeLoopbackAddr returns a loopback address nothing listens on now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestSecondSignalStopsAtOnce runs `orchestrator dev` as a real process with a long grace and a
// job that runs far longer: the first SIGINT logs the grace and that a second one stops at
// once, and starts a drain that would wait for the job; the second SIGINT ends the process at
// once, with exit code 130.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the orchestrator as a process; skipped with -short")
	}
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("shutdown_grace: 10m\n"), 0o600))
	addr := freeLoopbackAddr(t)
	cmd := exec.Command(os.Args[0], "dev")
	cmd.Env = append(os.Environ(),
		"ORCH_TEST_RUN_MAIN=1",
		"ORCH_CONFIG="+cfgPath,
		"ORCH_HTTP_ADDR="+addr,
		"ORCH_DATA_DIR="+filepath.Join(dir, "data"),
		"ORCH_EMBEDDED_REDIS_ADDR="+freeLoopbackAddr(t),
		"ORCH_LOG_LEVEL=info",
		"ORCH_TOKENS_FILE=", "ORCH_API_TOKENS=", "ORCH_API_TOKEN=", "ORCH_REDIS_PREFIX=",
	)
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	var waitErr error
	exited := make(chan struct{}) // closed once the process exited; waitErr is then set
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("orchestrator output:\n%s", out.String())
		}
	})

	api := client.New("http://"+addr, "")
	ctx := context.Background()
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := api.ListJobs(cctx, client.ListJobsParams{})
		return err == nil
	}, 2*time.Minute, 20*time.Millisecond, "the API answers")
	sub, err := api.Submit(ctx, client.SubmitRequest{JobID: "long", Type: "sleep", Agent: "t", Payload: []byte(`{"ms": 3600000}`)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		j, err := api.GetJob(ctx, sub.JobID)
		return err == nil && j.Status == "running"
	}, 2*time.Minute, 20*time.Millisecond, "the job runs")

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.Eventually(t, func() bool {
		return strings.Contains(out.String(), "Send it again (Ctrl-C) to stop at once")
	}, time.Minute, 20*time.Millisecond, "the first signal is logged")
	require.Contains(t, out.String(), "grace=10m0s")
	select {
	case <-exited:
		t.Fatalf("the first signal drains, with the job running for an hour and a grace of 10m; exited: %v", waitErr)
	default:
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	// Far under the 10m grace the drain would wait for: the second signal does not drain.
	select {
	case <-exited:
		var exit *exec.ExitError
		require.True(t, errors.As(waitErr, &exit), "exit error, got %v", waitErr)
		require.Equal(t, exitInterrupted, exit.ExitCode())
	case <-time.After(time.Minute):
		t.Fatal("the second SIGINT did not stop the process within a minute")
	}
	require.Contains(t, out.String(), "second signal: stopping at once")
}
