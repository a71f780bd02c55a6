package pools

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// helperEnv turns the test binary into a stand-in worker (TestMain): it prints its pool
// environment, then, by POOLS_HELPER_MODE, drains on SIGTERM (exit 0), crashes (exit 3) or
// ignores SIGTERM.
const helperEnv = "POOLS_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperWorker())
	}
	os.Exit(m.Run())
}

func helperWorker() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	fmt.Printf("pool=%s worker=%s types=%s model=%s\n", os.Getenv("ORCH_POOL_ID"), os.Getenv("ORCH_WORKER_ID"),
		os.Getenv("ORCH_WORKER_TYPES"), os.Getenv("ORCH_MODEL_ID"))
	switch os.Getenv("POOLS_HELPER_MODE") {
	case "crash":
		return 3
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		select {}
	}
	<-sigs
	fmt.Println("drained")
	return 0
}

// localProvisioner returns a LocalProvisioner running the helper in mode, and a channel that
// receives one value per exit.
func localProvisioner(t *testing.T, mode string, backoffMin time.Duration) (*LocalProvisioner, <-chan struct{}) {
	t.Helper()
	exited := make(chan struct{}, 16)
	l, err := NewLocal(LocalConfig{
		Binary: os.Args[0], LogDir: filepath.Join(t.TempDir(), "logs"),
		Env:               []string{helperEnv + "=1", "POOLS_HELPER_MODE=" + mode},
		RestartBackoffMin: backoffMin, RestartBackoffMax: 2 * backoffMin,
		OnExit: func() { exited <- struct{}{} },
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, p := range l.Running("p") {
			_ = l.Kill(p.WorkerID)
		}
	})
	return l, exited
}

func waitExit(t *testing.T, exited <-chan struct{}) {
	t.Helper()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not exit")
	}
}

func logOf(t *testing.T, l *LocalProvisioner, workerID string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(l.cfg.LogDir, workerID+".log"))
	return string(b)
}

func TestLocalProvisioner(t *testing.T) {
	t.Parallel()

	t.Run("StartsWithPoolEnvironmentAndDrainsOnStop", func(t *testing.T) {
		t.Parallel()
		l, exited := localProvisioner(t, "drain", time.Second)
		p, err := l.Start(t.Context(), WorkerSpec{PoolID: "p", WorkerID: "p-1", Types: []string{"noop", "sleep"}, ModelID: "m7"})
		require.NoError(t, err)
		require.Positive(t, p.PID)
		require.Equal(t, []Process{p}, l.Running("p"))
		require.Empty(t, l.Running("other"))
		require.Eventually(t, func() bool {
			return strings.Contains(logOf(t, l, "p-1"), "pool=p worker=p-1 types=noop,sleep model=m7")
		},
			20*time.Second, 10*time.Millisecond, "the worker's output goes to its log file")

		require.NoError(t, l.Stop("p-1"))
		require.True(t, l.Running("p")[0].Stopping())
		waitExit(t, exited)
		require.Empty(t, l.Running("p"))
		exits := l.Exited()
		require.Len(t, exits, 1)
		require.Zero(t, exits[0].Code)
		require.False(t, exits[0].Crashed)
		require.Contains(t, logOf(t, l, "p-1"), "drained")
		require.Empty(t, l.Exited(), "each exit is reported once")
		require.NoError(t, l.Stop("p-1"), "stopping an exited worker is not an error")
	})

	t.Run("CrashBacksOff", func(t *testing.T) {
		t.Parallel()
		l, exited := localProvisioner(t, "crash", time.Hour)
		_, err := l.Start(t.Context(), WorkerSpec{PoolID: "p", WorkerID: "p-crash"})
		require.NoError(t, err)
		waitExit(t, exited)
		exits := l.Exited()
		require.Len(t, exits, 1)
		require.Equal(t, 3, exits[0].Code)
		require.True(t, exits[0].Crashed)
		_, err = l.Start(t.Context(), WorkerSpec{PoolID: "p", WorkerID: "p-crash-2"})
		require.ErrorIs(t, err, ErrBackingOff)
		_, err = l.Start(t.Context(), WorkerSpec{PoolID: "other", WorkerID: "other-1"})
		require.NoError(t, err, "the backoff is the crashing pool's only")
		require.NoError(t, l.Kill("other-1"))
		waitExit(t, exited)
	})

	t.Run("KillEndsAStubbornWorker", func(t *testing.T) {
		t.Parallel()
		l, exited := localProvisioner(t, "stubborn", time.Second)
		_, err := l.Start(t.Context(), WorkerSpec{PoolID: "p", WorkerID: "p-stub"})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return strings.Contains(logOf(t, l, "p-stub"), "pool=p") },
			20*time.Second, 10*time.Millisecond)
		require.NoError(t, l.Kill("p-stub"))
		waitExit(t, exited)
		exits := l.Exited()
		require.Len(t, exits, 1)
		require.Equal(t, -1, exits[0].Code)
		require.Equal(t, "killed", exits[0].Signal)
		require.False(t, exits[0].Crashed, "asked to go: not a crash")
	})

	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		_, err := NewLocal(LocalConfig{LogDir: t.TempDir()})
		require.ErrorContains(t, err, "required")
	})
}
