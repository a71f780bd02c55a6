package outbox

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// TestGroupCommit checks the group commit's promises: every submit is committed once, no batch
// is larger than BatchMax, and no more than Committers batches are committed at once, however
// the submits arrive.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	const n = 3*BatchMax + 7
	var (
		mu        sync.Mutex
		seen      = map[int]int{}
		running   int
		most      int
		batches   int
		largest   int
		first     = make(chan struct{})
		release   = make(chan struct{})
		firstOnce sync.Once
		done      sync.WaitGroup
	)
	done.Add(n)
	o := New(Options{}, func(batch []int) {
		mu.Lock()
		running++
		most = max(most, running)
		batches++
		largest = max(largest, len(batch))
		for _, s := range batch {
			seen[s]++
		}
		mu.Unlock()
		firstOnce.Do(func() { close(first); <-release }) // hold one committer while the rest queue
		mu.Lock()
		running--
		mu.Unlock()
		for range batch {
			done.Done()
		}
	})
	o.Enqueue(0)
	<-first
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() { o.Enqueue(i) })
	}
	wg.Wait()
	close(release)
	done.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, n)
	for s, c := range seen {
		require.Equal(t, 1, c, "submit %d committed %d times", s, c)
	}
	require.LessOrEqual(t, most, Committers)
	require.LessOrEqual(t, largest, BatchMax)
	require.Less(t, batches, n, "queued submits share transactions")
}

// relayer answers PublishDue from a script of passes.
type relayer struct {
	passes []pass
	calls  int
	limits []int
}

type pass struct {
	n    int
	full bool
	err  error
}

func (r *relayer) PublishDue(_ context.Context, _ store.Fence, limit int) (int, bool, error) {
	r.limits = append(r.limits, limit)
	p := r.passes[r.calls]
	r.calls++
	return p.n, p.full, p.err
}

// TestDispatcherRunOnce: a pass repeats while batches come back full, stops at a short one or
// at one that published nothing, and reports what it published before an error.
func TestDispatcherRunOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		passes []pass
		want   int
		calls  int
		err    bool
	}{
		{"Short", []pass{{n: 3}}, 3, 1, false},
		{"FullThenShort", []pass{{n: 10, full: true}, {n: 10, full: true}, {n: 4}}, 24, 3, false},
		{"FullButNonePublished", []pass{{n: 0, full: true}}, 0, 1, false},
		{"Error", []pass{{n: 10, full: true}, {n: 2, err: errors.New("redis down")}}, 12, 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := &relayer{passes: c.passes}
			d := NewDispatcher(r, DispatcherConfig{Batch: 10})
			n, err := d.RunOnce(t.Context())
			require.Equal(t, c.want, n)
			require.Equal(t, c.calls, r.calls)
			require.Equal(t, c.err, err != nil)
			for _, l := range r.limits {
				require.Equal(t, 10, l)
			}
		})
	}
}
