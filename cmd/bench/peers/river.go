package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is River's job: it carries only its insert time.
type noopArgs struct {
	InsertNs int64 `json:"t"`
}

// Kind names the job kind.
func (noopArgs) Kind() string { return "noop" }

// riverSystem runs River on a fresh database peers_bench_<random>, dropped at
// the end.
type riverSystem struct {
	cfg     config
	adminDB *pgx.Conn
	dbName  string
	pool    *pgxpool.Pool
	client  *river.Client[pgx.Tx]
}

func newRiver(ctx context.Context, cfg config) (_ *riverSystem, err error) {
	admin, err := pgx.Connect(ctx, cfg.pgURL)
	if err != nil {
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	r := &riverSystem{cfg: cfg, adminDB: admin, dbName: "peers_bench_" + hex.EncodeToString(b)}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+r.dbName); err != nil {
		admin.Close(ctx)
		return nil, fmt.Errorf("create database: %w", err)
	}
	defer func() {
		if err != nil {
			_ = r.close(ctx)
		}
	}()
	u, err := url.Parse(cfg.pgURL)
	if err != nil {
		return nil, fmt.Errorf("parse -pg-url: %w", err)
	}
	u.Path = "/" + r.dbName
	if r.pool, err = pgxpool.New(ctx, u.String()); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(r.pool), nil)
	if err != nil {
		return nil, fmt.Errorf("new migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	// The client of the first scenario; startWorkers replaces it after a stop.
	if r.client, err = r.newClient(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *riverSystem) newClient() (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[noopArgs]) error {
		handle(job.Args.InsertNs)
		return nil
	}))
	c, err := river.NewClient(riverpgxv5.New(r.pool), &river.Config{
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: r.cfg.concurrency}},
		Workers: workers,
		// 0: River's defaults.
		FetchCooldown:     r.cfg.riverFetchCool,
		FetchPollInterval: r.cfg.riverFetchPollInt,
	})
	if err != nil {
		return nil, fmt.Errorf("new river client: %w", err)
	}
	return c, nil
}

// fill inserts n jobs with InsertMany in batches of 1000.
func (r *riverSystem) fill(ctx context.Context, n, _ int) error {
	const batch = 1000
	params := make([]river.InsertManyParams, 0, batch)
	for done := 0; done < n; done += len(params) {
		params = params[:0]
		for range min(batch, n-done) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := r.client.InsertMany(ctx, params); err != nil {
			return fmt.Errorf("insert many: %w", err)
		}
	}
	return nil
}

func (r *riverSystem) insert(ctx context.Context, insertNs int64) error {
	_, err := r.client.Insert(ctx, noopArgs{InsertNs: insertNs}, nil)
	return err
}

func (r *riverSystem) startWorkers(ctx context.Context) error {
	return r.client.Start(ctx)
}

// stopWorkers stops the client and makes a new one for the next scenario.
func (r *riverSystem) stopWorkers(ctx context.Context) error {
	if err := r.client.Stop(ctx); err != nil {
		return fmt.Errorf("stop river client: %w", err)
	}
	c, err := r.newClient()
	if err != nil {
		return err
	}
	r.client = c
	return nil
}

func (r *riverSystem) close(ctx context.Context) error {
	if r.client != nil {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = r.client.Stop(stopCtx)
		cancel()
	}
	if r.pool != nil {
		r.pool.Close()
	}
	_, err := r.adminDB.Exec(ctx, "DROP DATABASE IF EXISTS "+r.dbName+" WITH (FORCE)")
	r.adminDB.Close(ctx)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", r.dbName, err)
	}
	return nil
}
