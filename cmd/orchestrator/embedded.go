package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/embedredis"
	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/streams"
)

// recoveryScanBatch is how many jobs one page of the start-up rescue reads.
const recoveryScanBatch = 1000

// reasonRestarted is the last_error of an attempt lost because the process that ran it ended.
const reasonRestarted = "worker lost: the orchestrator restarted"

// embeddedOpener returns the serverOptions.open of the embedded mode. ownWorkers names the
// workers that live only inside the orchestrator process (dev's in-process worker): when a
// previous process ended, whatever they held ended with it, so their jobs are rescued at start
// instead of waiting for their leases to expire. nil: every worker is a separate process.
func embeddedOpener(ownWorkers func(cfg *config.Config) []string) func(context.Context, *config.Config, *slog.Logger) (*backends, error) {
	return func(ctx context.Context, cfg *config.Config, log *slog.Logger) (*backends, error) {
		var own []string
		if ownWorkers != nil {
			own = ownWorkers(cfg)
		}
		return openEmbedded(ctx, cfg, log, own)
	}
}

// openEmbedded opens the embedded single-node backends, in this order:
//
//  1. the SQLite database in cfg.DataDir, migrated (MigrateSQLite serialises concurrent starts);
//  2. the data directory's lock (leader.LocalElector): a second orchestrator on the same
//     directory stops here, with a message naming the holder, before it touches anything else;
//  3. the in-process Redis on cfg.EmbeddedRedisAddr (cfg.RedisAddr is set to it, so that what
//     is printed and what local workers are told is the real address);
//  4. the recovery: the Redis is new and empty, so every unfinished job is published again
//     (engine.RecoverRedis), and the jobs of ownWorkers are rescued (engine.Rescue).
//
// Everything it opened is closed again when it fails.
func openEmbedded(ctx context.Context, cfg *config.Config, log *slog.Logger, ownWorkers []string) (be *backends, err error) {
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded mode: data directory %q: %w", cfg.DataDir, err)
	}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()

	path := filepath.Join(dir, sqlite.DBFileName)
	v, _, err := db.MigrateSQLite(ctx, path, db.CmdUp, log)
	if err != nil {
		return nil, fmt.Errorf("embedded mode: migrate %s: %w", path, err)
	}
	log.Info("schema ready", "version", v, "database", path)
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return nil, fmt.Errorf("embedded mode: open store: %w", err)
	}
	closers = append(closers, func() { _ = st.Close() })

	work := newDeferredWork()
	el, err := leader.NewLocal(dir, st, leader.Config{Logger: log, OnElected: work.run})
	if err != nil {
		return nil, fmt.Errorf("embedded mode: %w", err)
	}
	if err := el.Start(ctx); err != nil {
		if errors.Is(err, leader.ErrDataDirInUse) {
			return nil, fmt.Errorf("embedded mode: %w: stop that orchestrator, or point ORCH_DATA_DIR at another directory", err)
		}
		return nil, fmt.Errorf("embedded mode: %w", err)
	}
	closers = append(closers, el.Stop)

	srv, err := embedredis.Start(cfg.EmbeddedRedisAddr)
	if err != nil {
		return nil, fmt.Errorf("embedded mode: %w", err)
	}
	closers = append(closers, srv.Close)
	cfg.RedisAddr, cfg.RedisPassword = srv.Addr(), ""
	rdb := streams.NewRedis(srv.Addr(), "")
	closers = append(closers, func() { _ = rdb.Close() })
	log.Info("embedded redis listening", "redis_addr", srv.Addr())

	fence := engine.Fence(func(ctx context.Context, tx store.Tx) error {
		return tx.LeaderCheckTerm(ctx, el.Term())
	})
	eng := engine.New(st, streams.New(rdb, streams.Options{Prefix: cfg.RedisPrefix}), cfg,
		engine.Options{Logger: log, Fence: fence, RedisStartsEmpty: true})
	if err := recoverEmbedded(ctx, cfg, st, eng, fence, ownWorkers, log); err != nil {
		return nil, fmt.Errorf("embedded mode: %w", err)
	}
	return &backends{
		store:         st,
		redis:         rdb,
		elector:       el,
		setLeaderWork: work.set,
		describe:      "SQLite " + path + ", embedded Redis " + srv.Addr(),
		database:      api.CheckSQLite,
		close:         closeAll,
	}, nil
}

// deferredWork is the OnElected of an elector that must be started before its leader-only
// work exists (the embedded mode takes the data directory's lock first of all): each term's
// run waits until set has installed the work, or until the term ends.
type deferredWork struct {
	once  sync.Once
	ready chan struct{} // closed by set
	work  func(ctx context.Context, term int64)
}

func newDeferredWork() *deferredWork { return &deferredWork{ready: make(chan struct{})} }

// set installs work; later calls are ignored.
func (d *deferredWork) set(work func(ctx context.Context, term int64)) {
	d.once.Do(func() {
		d.work = work
		close(d.ready)
	})
}

// run is leader.Config.OnElected.
func (d *deferredWork) run(ctx context.Context, term int64) {
	select {
	case <-d.ready:
		d.work(ctx, term)
	case <-ctx.Done():
	}
}

// recoverEmbedded brings a fresh start of the embedded mode back to where the previous
// process left off. The database is the truth and the in-process Redis starts empty:
//
//   - the jobs that ownWorkers held (claimed or running) lost their worker with the previous
//     process: each is rescued now, a failed attempt retried with backoff (or dead-lettered
//     when it was the last), rather than after its lease's TTL;
//   - engine.RecoverRedis sees a server without its marker and publishes every unfinished job
//     again, recreates the consumer groups, and hands dead letters back to the DLQ relay.
//
// Rescues come first, so that the jobs they retry are published by the same pass when due
// (and by the dispatcher otherwise).
func recoverEmbedded(ctx context.Context, cfg *config.Config, st store.Store, eng *engine.Engine, fence engine.Fence, ownWorkers []string,
	log *slog.Logger) error {
	if len(ownWorkers) > 0 {
		n, err := rescueOwnJobs(ctx, cfg, st, eng, ownWorkers)
		if err != nil {
			return err
		}
		if n > 0 {
			log.Info("rescued the jobs of the previous process's in-process worker", "jobs", n)
		}
	}
	res, err := eng.RecoverRedis(ctx, fence)
	if err != nil {
		return fmt.Errorf("publish unfinished jobs again: %w", err)
	}
	log.Info("unfinished jobs published again", "reason", res.Reason,
		"republished", res.Republished, "requeued", res.Requeued)
	return nil
}

// rescueOwnJobs rescues every claimed or running job of the configured types held by one of
// workers, and returns how many it rescued.
func rescueOwnJobs(ctx context.Context, cfg *config.Config, st store.Store, eng *engine.Engine, workers []string) (int, error) {
	own := make(map[string]bool, len(workers))
	for _, w := range workers {
		own[w] = true
	}
	rescued := 0
	for _, typ := range cfg.TypeNames() {
		for _, status := range []store.JobStatus{store.JobClaimed, store.JobRunning} {
			after := ""
			for {
				jobs, err := st.JobScan(ctx, store.JobScanParams{Type: typ, Status: status, AfterID: after, Limit: recoveryScanBatch})
				if err != nil {
					return rescued, fmt.Errorf("rescue orphaned jobs: %w", err)
				}
				for _, j := range jobs {
					if !own[j.WorkerID] {
						continue
					}
					if _, err := eng.Rescue(ctx, j.ID, reasonRestarted); err != nil {
						return rescued, fmt.Errorf("rescue orphaned jobs: %w", err)
					}
					rescued++
				}
				if len(jobs) < recoveryScanBatch {
					break
				}
				after = jobs[len(jobs)-1].ID
			}
		}
	}
	return rescued, nil
}
