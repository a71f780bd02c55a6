package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// embeddedConfig is a configuration for the embedded mode in dir, with the in-process Redis
// on a free loopback port.
func embeddedConfig(t *testing.T, dir string) *config.Config {
	t.Helper()
	env := map[string]string{"ORCH_DATA_DIR": dir, "ORCH_EMBEDDED_REDIS_ADDR": "127.0.0.1:0", "ORCH_NODE_ID": "n1"}
	cfg, err := config.Load("", func(k string) string { return env[k] })
	require.NoError(t, err)
	return cfg
}

// open opens the embedded backends with the given in-process workers.
func open(t *testing.T, cfg *config.Config, own ...string) (*backends, error) {
	t.Helper()
	return openEmbedded(t.Context(), cfg, slog.New(slog.DiscardHandler), own)
}

// engineOn builds an engine over opened backends.
func engineOn(be *backends, cfg *config.Config) *engine.Engine {
	return engine.New(be.store, streams.New(be.redis, streams.Options{}), cfg, engine.Options{})
}

func TestOpenEmbedded(t *testing.T) {
	t.Parallel()

	t.Run("SecondOrchestratorRefused", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "data")
		first, err := open(t, embeddedConfig(t, dir))
		require.NoError(t, err)
		require.NotNil(t, first.elector)
		require.True(t, first.elector.IsLeader())

		_, err = open(t, embeddedConfig(t, dir))
		require.ErrorContains(t, err, "another orchestrator is using data directory "+dir)
		require.ErrorContains(t, err, "ORCH_DATA_DIR")

		first.close()
		third, err := open(t, embeddedConfig(t, dir))
		require.NoError(t, err, "the lock goes with the process that held it")
		third.close()
	})

	t.Run("RedisAddrRefused", func(t *testing.T) {
		t.Parallel()
		cfg := embeddedConfig(t, t.TempDir())
		cfg.EmbeddedRedisAddr = "0.0.0.0:0"
		_, err := open(t, cfg)
		require.ErrorContains(t, err, "loopback")
		// Everything opened before the failure was released: the directory is free.
		cfg.EmbeddedRedisAddr = "127.0.0.1:0"
		be, err := open(t, cfg)
		require.NoError(t, err)
		be.close()
	})

	t.Run("RestartResumesUnfinishedJobs", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		cfg := embeddedConfig(t, dir)
		be, err := open(t, cfg, "dev-n1")
		require.NoError(t, err)
		ctx := t.Context()
		eng := engineOn(be, cfg)
		for _, id := range []string{"queued", "mine", "theirs"} {
			_, created, err := eng.Submit(ctx, engine.SubmitParams{JobID: id, Type: "noop", Agent: "a", Payload: []byte(`{}`), Actor: "test"})
			require.NoError(t, err)
			require.True(t, created)
		}
		claim := func(worker, id string) {
			res, err := eng.Claim(ctx, engine.ClaimParams{WorkerID: worker, NodeID: "n1", Items: []engine.ClaimItem{{JobID: id}}})
			require.NoError(t, err)
			require.Len(t, res.Claimed, 1)
		}
		claim("dev-n1", "mine")     // the in-process worker: dies with the process
		claim("worker-7", "theirs") // a worker process: outlives it, its lease decides
		be.close()                  // the process ends; the in-process Redis and its entries are gone

		cfg2 := embeddedConfig(t, dir)
		be2, err := open(t, cfg2, "dev-n1")
		require.NoError(t, err)
		defer be2.close()
		eng2 := engineOn(be2, cfg2)

		mine, err := eng2.Get(ctx, "mine")
		require.NoError(t, err)
		require.Equal(t, store.JobPending, mine.Status, "rescued: a failed attempt, retried")
		require.Equal(t, 1, mine.Attempts)
		require.Equal(t, reasonRestarted, mine.LastError)
		theirs, err := eng2.Get(ctx, "theirs")
		require.NoError(t, err)
		require.Equal(t, store.JobClaimed, theirs.Status, "another process's job is left to its lease")

		queued, err := eng2.Get(ctx, "queued")
		require.NoError(t, err)
		require.True(t, queued.Enqueued)
		// Published again into the new Redis: the queued job (and the claimed one, which a
		// worker will refuse); the rescued one waits for its backoff (the dispatcher's).
		n, err := streams.New(be2.redis, streams.Options{}).Len(ctx, "noop")
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
	})
}

func TestRequireLoopback(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"127.0.0.1:8080", "localhost:1", "[::1]:80"} {
		require.NoError(t, requireLoopback(ok), ok)
	}
	for _, bad := range []string{"0.0.0.0:8080", "10.0.0.1:80", ":8080"} {
		require.ErrorContains(t, requireLoopback(bad), "loopback only", bad)
	}
	require.Error(t, requireLoopback("nonsense"))
}

func TestPrintBanner(t *testing.T) {
	t.Parallel()
	cfg := embeddedConfig(t, "/srv/orch")
	cfg.RedisAddr = "127.0.0.1:6390"
	var out bytes.Buffer
	printBanner(&out, cfg, "http://127.0.0.1:8080", []string{"noop", "sleep"})
	for _, want := range []string{
		"http://127.0.0.1:8080", "/srv/orch", "127.0.0.1:6390",
		"orchctl --api-url http://127.0.0.1:8080 jobs submit --type sleep",
		"curl -s -X POST http://127.0.0.1:8080/jobs/submit",
	} {
		require.Contains(t, out.String(), want)
	}
	printBanner(io.Discard, cfg, "http://127.0.0.1:8080", []string{"noop"}) // no sleep type: still fine
}

func TestEmbeddedOpener(t *testing.T) {
	t.Parallel()
	cfg := embeddedConfig(t, t.TempDir())
	be, err := embeddedOpener(func(cfg *config.Config) []string { return []string{devWorkerID(cfg)} })(
		context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer be.close()
	require.Contains(t, be.describe, "SQLite")
	require.NotEqual(t, "127.0.0.1:0", cfg.RedisAddr, "the real address of the in-process Redis")
}

func TestDeferredWork(t *testing.T) {
	t.Parallel()
	// The elector elects before the work exists; the work then runs for the current term.
	d := newDeferredWork()
	ran := make(chan int64, 1)
	go d.run(t.Context(), 7)
	d.set(func(_ context.Context, term int64) { ran <- term })
	d.set(func(context.Context, int64) { t.Error("a second set is ignored") })
	require.Equal(t, int64(7), <-ran)

	// A term that ends before the work is installed returns at once.
	d2 := newDeferredWork()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	d2.run(ctx, 1)
}
