package reclaimer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// clock is a test clock that only moves when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type bundle struct {
	eng   *engine.Engine
	st    store.Store
	sc    *streams.Client
	cfg   *config.Config
	clock *clock
	group string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st := testenv.MySQLStore(t)
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	cfg.JobTypes["noop"].MaxAttempts = 2
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	ck := &clock{now: time.Now().UTC().Truncate(time.Second)}
	eng := engine.New(st, sc, cfg, engine.Options{Now: ck.Now, Logger: slog.New(slog.DiscardHandler)})
	return &bundle{eng: eng, st: st, sc: sc, cfg: cfg, clock: ck, group: streams.GroupName("noop")}
}

// reclaimer returns a Reclaimer over eng (the bundle's engine when nil).
func (b *bundle) reclaimer(eng Engine, cfg Config) *Reclaimer {
	if eng == nil {
		eng = b.eng
	}
	cfg = ConfigFrom(b.cfg, cfg)
	cfg.Logger = slog.New(slog.DiscardHandler)
	return New(eng, b.sc, cfg)
}

var seq atomic.Int64

func (b *bundle) submit(t *testing.T) store.Job {
	t.Helper()
	job, created, err := b.eng.Submit(context.Background(), engine.SubmitParams{
		JobID: fmt.Sprintf("job-%d-%d", time.Now().UnixNano(), seq.Add(1)), Type: "noop", Agent: "tester",
		Payload: json.RawMessage(`{}`), Actor: "agent:tester",
	})
	require.NoError(t, err)
	require.True(t, created)
	b.eng.FlushMarks(context.Background()) // as if the mark writer had run
	return job
}

// read reads n entries of the noop group as a worker that will die holding them.
func (b *bundle) read(t *testing.T, n int) []streams.Delivery {
	t.Helper()
	ds, err := b.sc.Read(context.Background(), streams.ReadParams{
		Group: b.group, Consumer: "dead-worker", Streams: []string{"noop"}, Count: n, Block: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.Len(t, ds, n)
	return ds
}

// age makes pending entries look idle for an hour (XCLAIM ... IDLE), instead of waiting.
func (b *bundle) age(t *testing.T, ds ...streams.Delivery) {
	t.Helper()
	args := []any{"XCLAIM", b.sc.StreamKey("noop"), b.group, "dead-worker", 0}
	for _, d := range ds {
		args = append(args, d.ID)
	}
	args = append(args, "IDLE", time.Hour.Milliseconds(), "JUSTID")
	require.NoError(t, b.sc.Redis().Do(context.Background(), args...).Err())
}

func (b *bundle) claim(t *testing.T, id string) engine.ClaimResult {
	t.Helper()
	res, err := b.eng.Claim(context.Background(), engine.ClaimParams{WorkerID: "dead-worker", Items: []engine.ClaimItem{{JobID: id, Stream: "noop"}}})
	require.NoError(t, err)
	require.Len(t, res.Claimed, 1)
	return res
}

func (b *bundle) job(t *testing.T, id string) store.Job {
	t.Helper()
	j, err := b.st.JobGet(context.Background(), id)
	require.NoError(t, err)
	return j
}

func (b *bundle) pending(t *testing.T) int64 {
	t.Helper()
	n, err := b.sc.PendingCount(context.Background(), "noop", b.group)
	require.NoError(t, err)
	return n
}

func (b *bundle) runOnce(t *testing.T, r *Reclaimer) Result {
	t.Helper()
	res, err := r.runOnce(context.Background())
	require.NoError(t, err)
	return res
}

func counterValue(t *testing.T, m *Metrics, outcome string) float64 {
	t.Helper()
	var out dto.Metric
	require.NoError(t, m.entries.WithLabelValues("noop", outcome).Write(&out))
	return out.GetCounter().GetValue()
}

func TestReclaimer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SettlesIdleEntries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		metrics := NewMetrics()
		r := b.reclaimer(nil, Config{Metrics: metrics})
		require.Equal(t, engine.RecoveryMarkerMissing, b.runOnce(t, r).Recovery.Reason, "the first pass sets the marker")

		done, due, held := b.submit(t), b.submit(t), b.submit(t)
		b.submit(t) // its entry will be deleted
		ds := b.read(t, 4)
		c := b.claim(t, done.ID)
		_, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "dead-worker", Results: []engine.Result{
			{JobID: done.ID, Attempt: 1, LeaseToken: c.Leases[done.ID].Token, Done: true},
		}})
		require.NoError(t, err)
		b.claim(t, held.ID)

		// Not idle long enough: nothing happens.
		require.Empty(t, b.runOnce(t, r).Outcomes)
		require.EqualValues(t, 4, b.pending(t))

		// gone's entry is deleted from the stream while pending (Redis reports deleted entries
		// whatever their idle time).
		_, err = b.sc.Redis().XDel(ctx, b.sc.StreamKey("noop"), ds[3].ID).Result()
		require.NoError(t, err)
		b.age(t, ds[:3]...)
		res := b.runOnce(t, r)
		require.Equal(t, map[string]int{
			string(engine.SettleTerminal): 1, string(engine.SettleRepublished): 1, string(engine.SettleLive): 1, OutcomeDeleted: 1,
		}, res.Outcomes)
		require.EqualValues(t, 1, b.pending(t), "only the entry of the job under a live lease is left")
		require.Equal(t, 1.0, counterValue(t, metrics, string(engine.SettleRepublished)))
		require.Zero(t, counterValue(t, metrics, OutcomeRescued), "pre-created at 0")

		// The republished entry is delivered to the next worker.
		again, err := b.sc.Read(ctx, streams.ReadParams{Group: b.group, Consumer: "w2", Streams: []string{"noop"}, Count: 10, Block: 10 * time.Millisecond})
		require.NoError(t, err)
		require.Len(t, again, 1)
		require.Equal(t, due.ID, again[0].JobID)
		require.NoError(t, b.sc.Ack(ctx, again))

		// The holder goes quiet past its lease: the job is rescued and the entry acked.
		b.clock.Add(b.cfg.Leases.TTL + time.Second)
		b.age(t, ds[2])
		res = b.runOnce(t, r)
		require.Equal(t, map[string]int{OutcomeRescued: 1}, res.Outcomes)
		require.Zero(t, b.pending(t))
		j := b.job(t, held.ID)
		require.Equal(t, store.JobPending, j.Status, "retried: attempts remain")
		require.Equal(t, 1, j.Attempts)
		require.Equal(t, 1.0, counterValue(t, metrics, OutcomeRescued))
	})

	t.Run("FailedRescueLeavesTheEntry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.reclaimer(failingRescue{b.eng}, Config{})
		b.runOnce(t, r)
		held := b.submit(t)
		ds := b.read(t, 1)
		b.claim(t, held.ID)
		b.clock.Add(b.cfg.Leases.TTL + time.Second)
		b.age(t, ds...)
		res := b.runOnce(t, r)
		require.Equal(t, map[string]int{OutcomeRescueFailed: 1}, res.Outcomes)
		require.EqualValues(t, 1, b.pending(t))
		require.Equal(t, store.JobClaimed, b.job(t, held.ID).Status)
	})

	t.Run("ResumesWhereThePassStopped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.reclaimer(nil, Config{Batch: 2, MaxCalls: 1})
		b.runOnce(t, r)
		for range 5 {
			b.submit(t)
		}
		b.age(t, b.read(t, 5)...)
		var settled []int
		for range 3 {
			settled = append(settled, b.runOnce(t, r).Outcomes[string(engine.SettleRepublished)])
		}
		require.Equal(t, []int{2, 2, 1}, settled, "two per call, one call per pass")
		require.Zero(t, b.pending(t))
	})

	t.Run("RecoversAfterRedisLostItsData", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.reclaimer(nil, Config{})
		b.runOnce(t, r)
		jobs := []store.Job{b.submit(t), b.submit(t)}
		b.read(t, 2)

		keys, err := b.sc.Redis().Keys(ctx, b.sc.Prefix()+"*").Result()
		require.NoError(t, err)
		require.NoError(t, b.sc.Redis().Del(ctx, keys...).Err()) // FLUSHALL, as far as this orchestrator sees

		res := b.runOnce(t, r)
		require.Equal(t, engine.RecoveryMarkerMissing, res.Recovery.Reason)
		require.Equal(t, 2, res.Recovery.Republished)
		for _, g := range GroupsOf(b.cfg) {
			ok, err := b.sc.GroupExists(ctx, g.Stream, g.Group)
			require.NoError(t, err)
			require.True(t, ok, "group %s recreated", g.Group)
		}
		ds, err := b.sc.Read(ctx, streams.ReadParams{Group: b.group, Consumer: "w2", Streams: []string{"noop"}, Count: 10, Block: 10 * time.Millisecond})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{jobs[0].ID, jobs[1].ID}, []string{ds[0].JobID, ds[1].JobID})
		require.Empty(t, b.runOnce(t, r).Recovery.Reason)
	})
}

// failingRescue is the engine with a Rescue that always fails.
type failingRescue struct{ *engine.Engine }

func (failingRescue) Rescue(context.Context, string, string) (string, error) {
	return "", errors.New("database unavailable")
}
