package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const asynqTaskType = "noop"

// asynqSystem runs asynq on a dedicated Redis DB, flushed before and after.
type asynqSystem struct {
	cfg    config
	rdb    *redis.Client
	client *asynq.Client
	server *asynq.Server
}

func newAsynq(ctx context.Context, cfg config) (*asynqSystem, error) {
	if cfg.redisDB == 0 {
		return nil, fmt.Errorf("refuse to use Redis DB 0: pass -redis-db")
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, DB: cfg.redisDB})
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("flush redis db %d: %w", cfg.redisDB, err)
	}
	return &asynqSystem{
		cfg:    cfg,
		rdb:    rdb,
		client: asynq.NewClient(asynq.RedisClientOpt{Addr: cfg.redisAddr, DB: cfg.redisDB}),
	}, nil
}

func asynqTask(insertNs int64) *asynq.Task {
	return asynq.NewTask(asynqTaskType, binary.LittleEndian.AppendUint64(nil, uint64(insertNs)))
}

// fill enqueues n tasks one by one from several goroutines: asynq has no
// batch enqueue in its client.
func (a *asynqSystem) fill(ctx context.Context, n, producers int) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := a.insert(ctx, 0); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

func (a *asynqSystem) insert(ctx context.Context, insertNs int64) error {
	_, err := a.client.EnqueueContext(ctx, asynqTask(insertNs))
	return err
}

func (a *asynqSystem) startWorkers(context.Context) error {
	a.server = asynq.NewServer(asynq.RedisClientOpt{Addr: a.cfg.redisAddr, DB: a.cfg.redisDB}, asynq.Config{
		Concurrency:       a.cfg.concurrency,
		LogLevel:          asynq.WarnLevel,
		TaskCheckInterval: a.cfg.asynqTaskCheck, // 0: asynq's default
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqTaskType, func(_ context.Context, t *asynq.Task) error {
		var ns int64
		if p := t.Payload(); len(p) == 8 {
			ns = int64(binary.LittleEndian.Uint64(p))
		}
		handle(ns)
		return nil
	})
	return a.server.Start(mux)
}

func (a *asynqSystem) stopWorkers(context.Context) error {
	if a.server != nil {
		a.server.Shutdown()
		a.server = nil
	}
	return nil
}

func (a *asynqSystem) close(ctx context.Context) error {
	_ = a.stopWorkers(ctx)
	a.client.Close()
	err := a.rdb.FlushDB(ctx).Err()
	a.rdb.Close()
	if err != nil {
		return fmt.Errorf("flush redis db %d: %w", a.cfg.redisDB, err)
	}
	return nil
}
