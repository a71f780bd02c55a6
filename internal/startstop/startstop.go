// Package startstop is the start/stop plumbing every background loop embeds: Start returns at
// once, Stop is idempotent and safe before Start, and the loop body is a runOnce called on a
// jittered interval (river's rivershared/startstop and maintenance services are the model).
package startstop

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Base is embedded by every loop type.
type Base struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	started bool
}

// Go starts run in a goroutine under a context derived from ctx; it returns false (and does
// nothing) when already started. Stop cancels that context and waits for run to return.
func (b *Base) Go(ctx context.Context, run func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return false
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}) // the goroutine must not read b.done: Stop clears it
	b.cancel, b.done, b.started = cancel, done, true
	go func() {
		defer close(done)
		run(ctx)
	}()
	return true
}

// Stop stops the loop and waits for it. Safe to call before Start and more than once; the loop
// may be started again afterwards.
func (b *Base) Stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.cancel, b.done, b.started = nil, nil, false
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// StartLoop runs Loop(ctx, p, once) in the Base's goroutine and returns nil at once; a loop
// already running is left as it is. It is the whole of every loop type's Start.
func (b *Base) StartLoop(ctx context.Context, p LoopParams, once func(ctx context.Context) error) error {
	b.Go(ctx, func(ctx context.Context) { Loop(ctx, p, once) })
	return nil
}

// Pass is runOnce as Loop's once: the pass's result is for tests and tools, the loop keeps the
// error only.
func Pass[R any](runOnce func(ctx context.Context) (R, error)) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := runOnce(ctx)
		return err
	}
}

// Loop calls once every interval ± jitter (a fraction, e.g. 0.1) until ctx ends, after a random
// initial stagger of up to one interval when stagger is set. Errors other than context
// cancellation are logged and the loop goes on. wake, when not nil, triggers an early pass.
func Loop(ctx context.Context, p LoopParams, once func(ctx context.Context) error) {
	delay := time.Duration(0)
	if p.Stagger {
		delay = time.Duration(rand.Int64N(int64(p.Interval) + 1))
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.Wake:
		}
		if err := once(ctx); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			p.Logger.Error("pass failed", "error", err)
			if p.Failed != nil {
				p.Failed()
			}
		}
		t.Reset(Jitter(p.Interval, p.Jitter))
	}
}

// LoopParams configure Loop.
type LoopParams struct {
	Interval time.Duration
	Jitter   float64
	Stagger  bool
	Wake     <-chan struct{}
	Logger   *slog.Logger
	// Failed, when set, is called after a pass that failed (and was logged): a loop's metric
	// of failed passes.
	Failed func()
}

// MaintenanceJitter is how much a maintenance loop's interval is jittered (10%), so that the
// loops of several instances, and of one process, do not run in step.
const MaintenanceJitter = 0.1

// Every is the LoopParams of a maintenance loop: a pass every interval, jittered by
// MaintenanceJitter, staggered at start when stagger, woken early by wake (nil: never).
func Every(interval time.Duration, stagger bool, wake <-chan struct{}, log *slog.Logger) LoopParams {
	return LoopParams{Interval: interval, Jitter: MaintenanceJitter, Stagger: stagger, Wake: wake, Logger: log}
}

// Jitter returns d randomly lengthened or shortened by up to frac of itself.
func Jitter(d time.Duration, frac float64) time.Duration {
	if frac <= 0 || d <= 0 {
		return d
	}
	delta := (rand.Float64()*2 - 1) * frac * float64(d)
	return d + time.Duration(delta)
}
