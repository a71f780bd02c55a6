package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/metrics/metricstest"
	"github.com/gpuorch/orchestrator/scheduler"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// fakeEngine answers the scheduler's passes from a script and records what each was asked.
type fakeEngine struct {
	mu     sync.Mutex
	script []pass // the answers still to give, in order; then an empty pass
	calls  []engine.ScheduleParams
}

type pass struct {
	res engine.ScheduleResult
	err error
}

func (f *fakeEngine) Schedule(_ context.Context, p engine.ScheduleParams) (engine.ScheduleResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, p)
	if len(f.script) == 0 {
		return engine.ScheduleResult{}, nil
	}
	next := f.script[0]
	f.script = f.script[1:]
	return next.res, next.err
}

// then queues the answers of the next passes.
func (f *fakeEngine) then(ps ...pass) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, ps...)
}

// took returns the parameters of the passes run so far and forgets them.
func (f *fakeEngine) took() []engine.ScheduleParams {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

func placed(typ string, ids ...string) []engine.Placement {
	out := make([]engine.Placement, len(ids))
	for i, id := range ids {
		out[i] = engine.Placement{JobID: id, Type: typ, Node: "n1", GPUs: []int{0}}
	}
	return out
}

func newScheduler(eng scheduler.Engine, m *scheduler.Metrics) *scheduler.Scheduler {
	return scheduler.New(eng, scheduler.Config{Metrics: m, Logger: slog.New(slog.DiscardHandler)})
}

func TestRunOnceCounts(t *testing.T) {
	t.Parallel()
	eng := &fakeEngine{}
	m := scheduler.NewMetrics([]string{"gpu", "train"})
	reg := metricstest.Registry(t, m)
	s := newScheduler(eng, m)

	fams := metricstest.Gather(t, reg)
	require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_scheduler_placements_total", map[string]string{"type": "train"}),
		"every type's series exists before a placement")
	require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_scheduler_failed_passes_total", nil))

	eng.then(pass{res: engine.ScheduleResult{
		Placed:  append(placed("gpu", "j1", "j2"), placed("train", "j3")...),
		Waiting: map[string]int{"no_capacity": 2, "reserved": 1},
	}})
	res, err := s.RunOnce(t.Context())
	require.NoError(t, err)
	require.Len(t, res.Placed, 3)
	fams = metricstest.Gather(t, reg)
	for want, labels := range map[float64]map[string]string{
		2: {"type": "gpu"}, 1: {"type": "train"},
	} {
		require.Equal(t, want, metricstest.Value(t, fams, "gpu_orchestrator_scheduler_placements_total", labels), labels)
	}
	waiting := func(reason string) float64 {
		t.Helper()
		return metricstest.Value(t, fams, "gpu_orchestrator_scheduler_waiting_jobs", map[string]string{"reason": reason})
	}
	require.Equal(t, 2.0, waiting("no_capacity"))
	require.Equal(t, 1.0, waiting("reserved"))
	for _, r := range []string{"no_fresh_telemetry", "no_worker", "unsatisfiable", "node_unknown", "telemetry_stale"} {
		require.Zero(t, waiting(r), "%s: every reason's series exists, at 0 when none waits for it", r)
	}

	// The next pass: the jobs that waited for room got it, one is still behind a held node.
	eng.then(pass{res: engine.ScheduleResult{Placed: placed("gpu", "j4"), Waiting: map[string]int{"reserved": 1}}})
	_, err = s.RunOnce(t.Context())
	require.NoError(t, err)
	fams = metricstest.Gather(t, reg)
	require.Equal(t, 3.0, metricstest.Value(t, fams, "gpu_orchestrator_scheduler_placements_total", map[string]string{"type": "gpu"}),
		"placements add up across passes")
	require.Zero(t, waiting("no_capacity"), "a reason none waits for any more is reset to 0")
	require.Equal(t, 1.0, waiting("reserved"))

	// A pass with nothing pending (the engine answers no Waiting map at all) resets every reason.
	_, err = s.RunOnce(t.Context())
	require.NoError(t, err)
	fams = metricstest.Gather(t, reg)
	require.Zero(t, waiting("reserved"))

	// A publish that fails after the commit: the placements were made, and count.
	eng.then(pass{res: engine.ScheduleResult{Placed: placed("train", "j5")}, err: errors.New("publish placed jobs: redis down")})
	_, err = s.RunOnce(t.Context())
	require.Error(t, err)
	fams = metricstest.Gather(t, reg)
	require.Equal(t, 2.0, metricstest.Value(t, fams, "gpu_orchestrator_scheduler_placements_total", map[string]string{"type": "train"}))

	// A stopped scheduler (leadership lost) no longer keeps the waiting gauge: its series go.
	eng.then(pass{res: engine.ScheduleResult{Waiting: map[string]int{"no_capacity": 1}}})
	_, err = s.RunOnce(t.Context())
	require.NoError(t, err)
	s.Stop()
	fams = metricstest.Gather(t, reg)
	require.NotContains(t, fams, "gpu_orchestrator_scheduler_waiting_jobs")
}

// maxRounds is scheduler.maxRounds: the passes one RunOnce runs back to back at most.
const maxRounds = 20

func TestRunOnceRounds(t *testing.T) {
	t.Parallel()

	t.Run("FullBatchWithPlacementsRunsAnotherPass", func(t *testing.T) {
		t.Parallel()
		eng := &fakeEngine{}
		s := newScheduler(eng, nil)
		hold := engine.Hold{JobID: "big", Node: "n2"}
		eng.then(
			pass{res: engine.ScheduleResult{Full: true, Placed: placed("gpu", "j1"), Held: hold, Published: 1,
				Waiting: map[string]int{"no_capacity": 5}}},
			pass{res: engine.ScheduleResult{Placed: placed("gpu", "j2"), Held: hold, Published: 1,
				Waiting: map[string]int{"no_capacity": 4}}},
		)
		res, err := s.RunOnce(t.Context())
		require.NoError(t, err)
		calls := eng.took()
		require.Len(t, calls, 2, "a full batch that placed jobs may hide more: another pass; a short one ends it")
		require.Equal(t, hold, calls[1].Held, "the second pass keeps the first one's hold")
		require.Len(t, res.Placed, 2, "the passes' placements add up")
		require.Equal(t, 2, res.Published)
		require.Equal(t, map[string]int{"no_capacity": 4}, res.Waiting, "what the last pass left waiting")
		require.Equal(t, hold, res.Held)
	})

	t.Run("FullBatchWithoutPlacementsStops", func(t *testing.T) {
		t.Parallel()
		eng := &fakeEngine{}
		s := newScheduler(eng, nil)
		eng.then(pass{res: engine.ScheduleResult{Full: true, Waiting: map[string]int{"no_capacity": 500}}})
		_, err := s.RunOnce(t.Context())
		require.NoError(t, err)
		require.Len(t, eng.took(), 1, "nothing placed: another pass would see the same jobs")
	})

	t.Run("BoundedByMaxRounds", func(t *testing.T) {
		t.Parallel()
		eng := &fakeEngine{}
		s := newScheduler(eng, nil)
		for i := range maxRounds + 5 {
			eng.then(pass{res: engine.ScheduleResult{Full: true, Placed: placed("gpu", fmt.Sprint("j", i))}})
		}
		res, err := s.RunOnce(t.Context())
		require.NoError(t, err)
		require.Len(t, eng.took(), maxRounds, "a stream of full batches does not keep one wake forever")
		require.Len(t, res.Placed, maxRounds)
		_, err = s.RunOnce(t.Context())
		require.NoError(t, err)
		require.Len(t, eng.took(), 5+1, "the next wake goes on: the five full batches left, then a short one")
	})
}

func TestRunOnceHold(t *testing.T) {
	t.Parallel()
	hold := engine.Hold{JobID: "big", Node: "n2"}
	for name, tc := range map[string]struct {
		err      error
		wantHeld engine.Hold
	}{
		"FencedClearsIt":    {fmt.Errorf("schedule gpu jobs: check leadership: %w", store.ErrFenced), engine.Hold{}},
		"OtherErrorKeepsIt": {errors.New("schedule gpu jobs: connection refused"), hold},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eng := &fakeEngine{}
			m := scheduler.NewMetrics(nil)
			reg := metricstest.Registry(t, m)
			s := newScheduler(eng, m)
			eng.then(pass{res: engine.ScheduleResult{Held: hold, Waiting: map[string]int{"no_capacity": 1}}})
			_, err := s.RunOnce(t.Context())
			require.NoError(t, err)
			eng.then(pass{err: tc.err})
			_, err = s.RunOnce(t.Context())
			require.ErrorIs(t, err, tc.err)
			require.Equal(t, 1.0, metricstest.Value(t, metricstest.Gather(t, reg), "gpu_orchestrator_scheduler_waiting_jobs",
				map[string]string{"reason": "no_capacity"}), "a failed pass leaves the last count")
			_, err = s.RunOnce(t.Context())
			require.NoError(t, err)
			calls := eng.took()
			require.Len(t, calls, 3)
			require.Equal(t, hold, calls[1].Held, "the pass after the hold was taken is given it")
			require.Equal(t, tc.wantHeld, calls[2].Held)
		})
	}
}

// TestStart: a wake runs a pass at once, long before the tick, and a failed pass is counted.
func TestStart(t *testing.T) {
	t.Parallel()
	eng := &fakeEngine{}
	m := scheduler.NewMetrics(nil)
	reg := metricstest.Registry(t, m)
	w := scheduler.NewWaker(nil, nil)
	s := scheduler.New(eng, scheduler.Config{Interval: time.Minute, Wakes: w.C(), Metrics: m,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(s.Stop)
	require.Eventually(t, func() bool { return len(eng.took()) == 1 }, 5*time.Second, 5*time.Millisecond,
		"the first pass runs at once (no stagger)")

	eng.then(pass{err: errors.New("schedule gpu jobs: connection refused")})
	w.Wake()
	failed := func() float64 {
		return metricstest.Value(t, metricstest.Gather(t, reg), "gpu_orchestrator_scheduler_failed_passes_total", nil)
	}
	require.Eventually(t, func() bool { return failed() == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Len(t, eng.took(), 1, "one wake, one pass")
}

func TestWaker(t *testing.T) {
	t.Parallel()

	t.Run("WakeNeverBlocks", func(t *testing.T) {
		t.Parallel()
		w := scheduler.NewWaker(nil, nil)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 1000 {
				w.Wake() // nobody reads C
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			require.FailNow(t, "Wake blocked with nobody reading C")
		}
		requireWoken(t, w)
		select {
		case <-w.C():
			require.FailNow(t, "a burst of wakes is one wake")
		default:
		}
	})

	t.Run("NeverBlocksOnRedis", func(t *testing.T) {
		t.Parallel()
		// Nothing listens on this address: every publish fails, after its timeout at worst.
		rdb := streams.NewRedis(unreachable(t), "")
		t.Cleanup(func() { _ = rdb.Close() })
		w := scheduler.NewWaker(streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)}), nil)
		start := time.Now()
		for range 100 {
			w.Wake()
		}
		require.Less(t, time.Since(start), time.Second, "the publishes run beside Wake")
		requireWoken(t, w)
	})

	t.Run("ReachesAnotherInstance", func(t *testing.T) {
		t.Parallel()
		rdb := streams.NewRedis(testenv.RedisAddr(t), "")
		t.Cleanup(func() { _ = rdb.Close() })
		prefix := testenv.RedisPrefix(t)
		follower := scheduler.NewWaker(streams.New(rdb, streams.Options{Prefix: prefix}), nil)
		leader := scheduler.NewWaker(streams.New(rdb, streams.Options{Prefix: prefix}), nil)
		ctx, cancel := context.WithCancel(t.Context())
		t.Cleanup(cancel)
		leader.Listen(ctx)
		// A wake published before the subscription is in place is lost (pub/sub keeps nothing):
		// wake until one arrives.
		require.Eventually(t, func() bool {
			follower.Wake()
			select {
			case <-leader.C():
				return true
			default:
				return false
			}
		}, 5*time.Second, 10*time.Millisecond, "a wake on one instance reaches the leader's C")
		requireWoken(t, follower) // its own C got the wakes too
	})
}

// requireWoken requires a wake waiting on w's C.
func requireWoken(t *testing.T, w *scheduler.Waker) {
	t.Helper()
	select {
	case <-w.C():
	default:
		require.FailNow(t, "no wake on C")
	}
}

// unreachable is the address of a port nothing listens on.
func unreachable(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
