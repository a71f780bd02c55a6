package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// system is one job queue under test. Its handlers call handle with the
// insert time the job carries.
type system interface {
	// fill inserts n jobs while no worker runs, the system's fastest ordinary way.
	fill(ctx context.Context, n, producers int) error
	// insert inserts one job carrying insertNs.
	insert(ctx context.Context, insertNs int64) error
	// startWorkers starts the workers (a fresh server or client each time).
	startWorkers(ctx context.Context) error
	// stopWorkers stops them, letting running handlers finish.
	stopWorkers(ctx context.Context) error
	// close releases everything and deletes the system's data.
	close(ctx context.Context) error
}

// Result is one scenario's figures on one system.
type Result struct {
	Jobs          int          `json:"jobs"`
	Expected      int          `json:"expected"`
	Seconds       float64      `json:"seconds"`
	JobsPerSec    float64      `json:"jobs_per_sec"`
	Window        string       `json:"window"`
	Inserted      int          `json:"inserted"`
	InsertSeconds float64      `json:"insert_seconds,omitempty"`
	InsertPerSec  float64      `json:"insert_per_sec,omitempty"`
	TargetRate    int          `json:"target_rate,omitempty"`
	LatencyMs     *Percentiles `json:"latency_ms,omitempty"`
	InsertErrors  int64        `json:"insert_errors,omitempty"`
	TimedOut      bool         `json:"timed_out,omitempty"`
	Error         string       `json:"error,omitempty"`
}

func (r *Result) finish(rec *recorder, from, to int64) {
	r.Jobs = rec.count()
	r.Seconds = round3(float64(to-from) / 1e9)
	if r.Seconds > 0 {
		r.JobsPerSec = round1(float64(r.Jobs) / r.Seconds)
	}
}

// inserted records the insert phase: n jobs inserted and errs failed in d.
func (r *Result) inserted(n int, errs int64, d time.Duration) {
	r.Inserted, r.InsertErrors = n, errs
	r.InsertSeconds = round3(d.Seconds())
	r.InsertPerSec = round1(float64(n) / d.Seconds())
}

// endToEnd waits up to timeout for the handlers and records the window from t0 (the first
// insert) to the last handler end, with each job's insert -> start latency.
func (r *Result) endToEnd(rec *recorder, t0 time.Time, timeout time.Duration) {
	r.TimedOut = !rec.wait(timeout)
	r.finish(rec, t0.UnixNano(), rec.lastEnd())
	r.LatencyMs = percentilesMs(rec.lat[:rec.count()])
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// burndown inserts n jobs with no worker running, then starts the workers and
// measures first handler start -> last handler end.
func burndown(ctx context.Context, s system, cfg config) (res Result, err error) {
	res = Result{Expected: cfg.n, Window: "first handler start -> last handler end (backlog inserted before the workers started)"}
	rec := newRecorder(cfg.n)
	current.Store(rec)
	defer current.Store(nil)

	t0 := time.Now()
	if err := s.fill(ctx, cfg.n, cfg.producers); err != nil {
		return res, fmt.Errorf("fill: %w", err)
	}
	res.inserted(cfg.n, 0, time.Since(t0))

	if err := s.startWorkers(ctx); err != nil {
		return res, fmt.Errorf("start workers: %w", err)
	}
	res.TimedOut = !rec.wait(cfg.timeout)
	first, last := rec.window()
	res.finish(rec, first, last)
	return res, s.stopWorkers(ctx)
}

// streaming runs the workers while cfg.producers closed-loop producers insert
// n jobs one by one: first insert -> last handler end.
func streaming(ctx context.Context, s system, cfg config) (res Result, err error) {
	res = Result{Expected: cfg.n, Window: "first insert -> last handler end (workers running)"}
	rec := newRecorder(cfg.n)
	current.Store(rec)
	defer current.Store(nil)
	if err := s.startWorkers(ctx); err != nil {
		return res, fmt.Errorf("start workers: %w", err)
	}

	var next, errs atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range cfg.producers {
		wg.Go(func() {
			for next.Add(1) <= int64(cfg.n) {
				if err := s.insert(ctx, time.Now().UnixNano()); err != nil {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res.inserted(cfg.n-int(errs.Load()), errs.Load(), time.Since(t0))
	res.endToEnd(rec, t0, cfg.timeout)
	return res, s.stopWorkers(ctx)
}

// latency offers cfg.rate inserts per second for cfg.duration, open loop: each
// insert is sent at its scheduled time on its own goroutine (at most
// maxInflight outstanding). The handler measures start - insert.
func latency(ctx context.Context, s system, cfg config) (res Result, err error) {
	total := int(float64(cfg.rate) * cfg.duration.Seconds())
	res = Result{Expected: total, TargetRate: cfg.rate, Window: "first insert -> last handler end (open loop at target_rate)"}
	rec := newRecorder(total)
	current.Store(rec)
	defer current.Store(nil)
	if err := s.startWorkers(ctx); err != nil {
		return res, fmt.Errorf("start workers: %w", err)
	}

	const maxInflight = 512
	sem := make(chan struct{}, maxInflight)
	var errs atomic.Int64
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(cfg.rate)
	t0 := time.Now()
	for i := range total {
		time.Sleep(time.Until(t0.Add(time.Duration(i) * interval)))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.insert(ctx, time.Now().UnixNano()); err != nil {
				errs.Add(1)
			}
		})
	}
	wg.Wait()
	res.inserted(total-int(errs.Load()), errs.Load(), time.Since(t0))
	res.endToEnd(rec, t0, cfg.timeout)
	return res, s.stopWorkers(ctx)
}
