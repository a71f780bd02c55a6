package worker

import (
	"context"
	"sync"
	"time"
)

// batcher groups items reported one by one into calls of up to size items: a batch goes out
// when it is full or delay after its first item arrived. One flush runs at a time, and items
// added during a flush form the next batch, which goes as soon as that flush returns, so under
// load batches fill up on their own without waiting for the delay again.
type batcher[T any] struct {
	size  int
	delay time.Duration
	// flush sends one batch. It must return when ctx ends, dealing with the items itself (it is
	// also called with the leftovers once ctx has ended).
	flush func(ctx context.Context, items []T)

	mu     sync.Mutex
	items  []T
	closed bool
	kick   chan struct{}
	done   chan struct{}
}

func newBatcher[T any](size int, delay time.Duration, flush func(context.Context, []T)) *batcher[T] {
	return &batcher[T]{size: size, delay: delay, flush: flush, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// Add queues an item; it never blocks. Items added after Close are flushed only if the run loop
// has not finished yet.
func (b *batcher[T]) Add(item T) {
	b.mu.Lock()
	b.items = append(b.items, item)
	b.mu.Unlock()
	b.wake()
}

// Close asks the run loop to flush what is queued and return.
func (b *batcher[T]) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wake()
}

// Done is closed when the run loop has returned.
func (b *batcher[T]) Done() <-chan struct{} { return b.done }

func (b *batcher[T]) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *batcher[T]) state() (n int, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.items), b.closed
}

func (b *batcher[T]) take() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.items), b.size)
	out := make([]T, n)
	copy(out, b.items)
	b.items = append(b.items[:0], b.items[n:]...)
	return out
}

// run flushes batches until Close was called and the queue is empty, or ctx ends (then the
// leftovers go to flush with the ended ctx).
func (b *batcher[T]) run(ctx context.Context) {
	defer close(b.done)
	// busy: the last flush found items queued behind it. They waited for that flush already,
	// so they go at once: under load the batches are what piles up during one flush, and the
	// delay is paid only by the first item after a quiet spell.
	busy := false
	for {
		n, closed := b.state()
		if n == 0 {
			busy = false
			if closed {
				return
			}
			select {
			case <-b.kick:
			case <-ctx.Done():
				b.drain(ctx)
				return
			}
			continue
		}
		if n < b.size && !closed && !busy && !b.wait(ctx) {
			b.drain(ctx)
			return
		}
		// Another goroutine may have taken the items meanwhile (a claim carries results along).
		items := b.take()
		if len(items) > 0 {
			b.flush(ctx, items)
		}
		busy = len(items) > 0
	}
}

// wait lets a partial batch fill up for delay; false when ctx ended.
func (b *batcher[T]) wait(ctx context.Context) bool {
	t := time.NewTimer(b.delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-b.kick:
			if n, closed := b.state(); n >= b.size || closed {
				return true
			}
		case <-ctx.Done():
			return false
		}
	}
}

func (b *batcher[T]) drain(ctx context.Context) {
	for {
		items := b.take()
		if len(items) == 0 {
			return
		}
		b.flush(ctx, items)
	}
}
