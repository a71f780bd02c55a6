package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/streams"
)

// wakeTimeout bounds the PUBLISH of one wake.
const wakeTimeout = time.Second

// Waker wakes the leader's scheduler from any orchestrator instance. Wake tells this
// process's scheduler at once (C) and publishes the wake on Redis, where the leader's Listen
// hears it; a burst of wakes is one publish in flight and at most one more after it.
type Waker struct {
	sc    *streams.Client
	topic string
	c     chan struct{}
	log   *slog.Logger

	mu      sync.Mutex
	sending bool // a publish is in flight
	again   bool // a wake came in while it was
}

// NewWaker returns a Waker of the scheduler that publishes through sc (nil: in-process only).
func NewWaker(sc *streams.Client, log *slog.Logger) *Waker {
	return NewTopicWaker(sc, streams.TopicSchedule, log)
}

// NewTopicWaker returns a Waker of another leader loop, on its wake topic (streams.TopicFlows:
// the flows' resolver).
func NewTopicWaker(sc *streams.Client, topic string, log *slog.Logger) *Waker {
	component := "scheduler"
	if topic != streams.TopicSchedule {
		component = topic
	}
	return &Waker{sc: sc, topic: topic, c: make(chan struct{}, 1), log: logging.Component(log, component)}
}

// C is the channel a Scheduler's Config.Wakes reads.
func (w *Waker) C() <-chan struct{} { return w.c }

// Wake asks for a pass soon. It never blocks.
func (w *Waker) Wake() {
	w.local()
	if w.sc == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sending {
		w.again = true
		return
	}
	w.sending = true
	go w.publish()
}

// publish publishes wakes until none came in during the last one.
func (w *Waker) publish() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		if err := w.sc.Wake(ctx, w.topic); err != nil {
			w.log.Debug("publish a wake failed; the leader's tick covers it", "topic", w.topic, "error", err)
		}
		cancel()
		w.mu.Lock()
		if !w.again {
			w.sending = false
			w.mu.Unlock()
			return
		}
		w.again = false
		w.mu.Unlock()
	}
}

func (w *Waker) local() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Listen forwards the wakes published by every instance to C until ctx ends: the leader runs
// it while it leads.
func (w *Waker) Listen(ctx context.Context) {
	if w.sc == nil {
		return
	}
	wakes, closeSub := w.sc.Wakes(ctx, w.topic)
	go func() {
		defer closeSub()
		for {
			select {
			case <-ctx.Done():
				return
			case <-wakes:
				w.local()
			}
		}
	}()
}
