package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/reclaimer"
	"github.com/gpuorch/orchestrator/retention"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// loop is what every background loop offers (internal/startstop): Start returns at once, so
// one slow loop does not hold back the others, and Stop is idempotent, so every exit path may
// call it.
type loop interface {
	Start(ctx context.Context) error
	Stop()
}

// leaderWork returns the leader-only work of one term: the dispatcher, the lease purger, the
// reclaimer (with Redis data-loss recovery), the stream trimmer, the DLQ relay and retention,
// every write fenced by the term. It runs until the leader context ends (leadership lost or
// resigned), then stops the loops before the elector campaigns again. Extra loops (pools) are
// added by extra.
func leaderWork(cfg *config.Config, st store.Store, eng *engine.Engine, sc *streams.Client, rm *reclaimer.Metrics, log *slog.Logger,
	extra ...func(term int64, fence engine.Fence) loop) func(ctx context.Context, term int64) {
	return func(ctx context.Context, term int64) {
		fence := termFence(term)
		loops := []loop{
			outbox.NewDispatcher(eng, outbox.DispatcherConfig{
				Interval: cfg.DispatchInterval, Batch: cfg.DispatchBatch, Stagger: true, Fence: fence, Logger: log,
			}),
			leases.NewLeasePurger(eng, leases.LeasePurgerConfig{
				Interval: cfg.Leases.PurgeInterval, Stagger: true, Fence: fence, Logger: log,
			}),
			reclaimer.New(eng, sc, reclaimer.ConfigFrom(cfg, reclaimer.Config{Fence: fence, Metrics: rm, Logger: log, Stagger: true})),
			reclaimer.NewTrimmer(sc, reclaimer.TrimmerConfigFrom(cfg, reclaimer.TrimmerConfig{Metrics: rm, Logger: log, Stagger: true})),
			reclaimer.NewDLQRelay(eng, reclaimer.DLQRelayConfig{
				Interval: cfg.DispatchInterval, Batch: cfg.DispatchBatch, Fence: fence, Stagger: true, Logger: log,
			}),
			retention.NewCleaner(st, cfg, retention.Config{
				Interval: cfg.RetentionInterval, Batch: cfg.RetentionBatch, Fence: fence, Stagger: true, Logger: log,
			}),
		}
		for _, x := range extra {
			loops = append(loops, x(term, fence))
		}
		log.Info("leading: starting leader-only loops", "term", term, "loops", len(loops))
		for _, l := range loops {
			_ = l.Start(ctx) // returns at once
		}
		<-ctx.Done()
		for i := len(loops) - 1; i >= 0; i-- {
			loops[i].Stop()
		}
		log.Info("leader-only loops stopped", "term", term)
	}
}

// termFence refuses a leader-only write once term is no longer the current leadership term.
func termFence(term int64) engine.Fence {
	return func(ctx context.Context, tx store.Tx) error { return tx.LeaderCheckTerm(ctx, term) }
}

// currentTerm tracks the term this instance leads in, for the writes that happen outside the
// leader loops but must still be fenced (a rescue asked through the API).
type currentTerm struct{ v atomic.Int64 }

// fence refuses the write when this instance does not lead, or no longer in the same term.
func (t *currentTerm) fence(ctx context.Context, tx store.Tx) error {
	term := t.v.Load()
	if term == 0 {
		return fmt.Errorf("this instance does not lead: %w", store.ErrFenced)
	}
	return tx.LeaderCheckTerm(ctx, term)
}

// track wraps a leader work function so that t follows the term it runs in.
func (t *currentTerm) track(work func(ctx context.Context, term int64)) func(ctx context.Context, term int64) {
	return func(ctx context.Context, term int64) {
		t.v.Store(term)
		defer t.v.CompareAndSwap(term, 0)
		work(ctx, term)
	}
}

// newMySQLElector opens the elector's own small pool (its leader pins one connection for the
// whole term) and returns an elector that runs work while it leads.
func newMySQLElector(cfg *config.Config, st store.Store, log *slog.Logger, work func(ctx context.Context, term int64)) (leader.Elector, func(), error) {
	db, err := sql.Open("mysql", cfg.MySQLDSN)
	if err != nil {
		return nil, nil, fmt.Errorf("open the elector's connection: %w", err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(2)
	el, err := leader.NewMySQL(db, st, leader.Config{
		LockName: leaderLockName(cfg.MySQLDSN), OnElected: work, Logger: log, Stagger: true,
	})
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return el, func() { _ = db.Close() }, nil
}

// leaderLockName is the GET_LOCK name of the cluster whose database dsn names. Lock names are
// server-wide while terms live in the cluster's database: clusters sharing a MariaDB server
// (one database each) must not share a lock, or all but one of them would have no leader.
// A name past MySQL's limit is shortened with a hash of the database name.
func leaderLockName(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil || cfg.DBName == "" {
		return leader.LockNameDefault
	}
	name := leader.LockNameDefault + ":" + cfg.DBName
	if len(name) > leader.LockNameMax {
		sum := sha256.Sum256([]byte(cfg.DBName))
		name = leader.LockNameDefault + ":" + hex.EncodeToString(sum[:16])
	}
	return name
}
