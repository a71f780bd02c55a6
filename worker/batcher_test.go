package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBatcher(t *testing.T) {
	t.Parallel()

	t.Run("FlushesFullBatchesAndLeftoversOnClose", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var batches [][]int
		b := newBatcher(3, time.Hour, func(_ context.Context, items []int) {
			mu.Lock()
			defer mu.Unlock()
			batches = append(batches, items)
		})
		go b.run(context.Background())
		for i := range 7 {
			b.Add(i)
		}
		b.Close()
		<-b.Done()
		var all []int
		for _, batch := range batches {
			require.LessOrEqual(t, len(batch), 3)
			all = append(all, batch...)
		}
		require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6}, all)
	})

	t.Run("ItemsQueuedDuringAFlushGoRightAfterIt", func(t *testing.T) {
		t.Parallel()
		inFlush, release := make(chan struct{}), make(chan struct{})
		got := make(chan []int, 2)
		flushes := 0 // only the run loop touches it
		b := newBatcher(2, time.Hour, func(_ context.Context, items []int) {
			if flushes++; flushes == 1 {
				close(inFlush)
				<-release
			}
			got <- items
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go b.run(ctx)
		b.Add(1)
		b.Add(2) // full: goes at once
		<-inFlush
		b.Add(3) // queued behind the flush, and not full
		close(release)
		require.Equal(t, []int{1, 2}, <-got)
		select {
		case batch := <-got:
			require.Equal(t, []int{3}, batch, "the item that waited for a flush must not wait for the delay too")
		case <-time.After(10 * time.Second):
			t.Fatal("the queued item waited for the hour-long delay")
		}
	})

	t.Run("FlushesAfterDelay", func(t *testing.T) {
		t.Parallel()
		got := make(chan []int, 1)
		b := newBatcher(100, 5*time.Millisecond, func(_ context.Context, items []int) { got <- items })
		go b.run(context.Background())
		b.Add(1)
		b.Add(2)
		select {
		case items := <-got:
			require.Equal(t, []int{1, 2}, items)
		case <-time.After(5 * time.Second):
			t.Fatal("partial batch never flushed")
		}
		b.Close()
		<-b.Done()
	})

	t.Run("HandsLeftoversToFlushWhenContextEnds", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		var got []int
		var ctxErr error
		b := newBatcher(100, time.Hour, func(ctx context.Context, items []int) {
			got = append(got, items...)
			ctxErr = ctx.Err()
		})
		b.Add(1)
		cancel()
		b.run(ctx)
		require.Equal(t, []int{1}, got)
		require.ErrorIs(t, ctxErr, context.Canceled)
	})
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for try := range 20 {
		d := backoff(try, 100*time.Millisecond, 2*time.Second)
		require.GreaterOrEqual(t, d, 50*time.Millisecond)
		require.LessOrEqual(t, d, 2*time.Second)
	}
	require.GreaterOrEqual(t, backoff(10, 100*time.Millisecond, 2*time.Second), time.Second)
}
