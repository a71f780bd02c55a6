package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/embedredis"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// setupEmbedded is setup with the embedded mode's Redis in place of the real one.
func setupEmbedded(t *testing.T) *bundle {
	t.Helper()
	srv, err := embedredis.Start("127.0.0.1:0")
	require.NoError(t, err)
	rdb := streams.NewRedis(srv.Addr(), "")
	sc := streams.New(rdb, streams.Options{})
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	st := testenv.MySQLStore(t)
	ck := &clock{now: time.Now().UTC().Truncate(time.Second)}
	eng := engine.New(st, sc, cfg, engine.Options{Now: ck.Now})
	t.Cleanup(func() {
		eng.FlushMarks(context.Background())
		_ = rdb.Close()
		srv.Close()
	})
	return &bundle{eng: eng, store: st, streams: sc, clock: ck, cfg: cfg}
}

// TestClaimChecksEntries: a claim that must prove its items (CheckEntries, what the API asks
// for) takes a job only for the job's recorded entry or an entry Redis delivered to the
// claiming consumer; an invented or another consumer's entry is refused and leaves the job,
// its stream_id included, as it was. Against the real Redis and the embedded one.
func TestClaimChecksEntries(t *testing.T) {
	t.Parallel()
	for name, mk := range map[string]func(*testing.T) *bundle{"Redis": setup, "Embedded": setupEmbedded} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := mk(t)
			group := streams.GroupName("noop")
			require.NoError(t, b.streams.EnsureGroup(ctx, "noop", group))
			job := b.submit(t, "noop")
			recorded, err := b.store.JobGet(ctx, job.ID)
			require.NoError(t, err)
			require.NotEmpty(t, recorded.StreamID, "the submit's mark has landed")

			// A second entry of the job, as a republish makes: not the recorded one, so only
			// Redis can prove a claim of it.
			ids, err := b.streams.Publish(ctx, []streams.Message{{Stream: "noop", JobID: job.ID, Type: "noop"}})
			require.NoError(t, err)
			dup := ids[0]
			ds, err := b.streams.Read(ctx, streams.ReadParams{Group: group, Consumer: "w2", Streams: []string{"noop"}, Count: 10, Block: 5 * time.Second})
			require.NoError(t, err)
			require.Len(t, ds, 2, "w2 read both entries")

			claim := func(worker, stream, msgID string, types []string) engine.ClaimResult {
				t.Helper()
				res, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: worker, CheckEntries: true, Types: types,
					Items: []engine.ClaimItem{{JobID: job.ID, Stream: stream, MessageID: msgID}}})
				require.NoError(t, err)
				return res
			}
			refused := func(res engine.ClaimResult, reason string) {
				t.Helper()
				require.Empty(t, res.Claimed)
				require.Equal(t, []engine.Refusal{{JobID: job.ID, Reason: reason}}, res.Refused)
				now, err := b.store.JobGet(ctx, job.ID)
				require.NoError(t, err)
				require.EqualValues(t, "pending", now.Status)
				require.Equal(t, recorded.StreamID, now.StreamID, "the job's stream_id is untouched")
				require.Zero(t, now.Attempts)
			}
			refused(claim("w1", "noop", "1-0", nil), engine.RefusedNotDelivered)
			refused(claim("w1", "noop", "", nil), engine.RefusedNotDelivered)
			refused(claim("w1", "noop", dup, nil), engine.RefusedNotDelivered)  // w2's entry
			refused(claim("w2", "sleep", dup, nil), engine.RefusedNotDelivered) // not the type's stream
			refused(claim("w2", "noop", dup, []string{"sleep"}), engine.RefusedOutOfScope)

			res := claim("w2", "noop", dup, []string{"noop"})
			require.Len(t, res.Claimed, 1, "%+v", res.Refused)
			now, err := b.store.JobGet(ctx, job.ID)
			require.NoError(t, err)
			require.Equal(t, dup, now.StreamID, "the delivered entry is the job's entry now")

			// The recorded entry proves itself, whoever read it (the check costs no Redis call).
			other := b.submit(t, "noop")
			rec, err := b.store.JobGet(ctx, other.ID)
			require.NoError(t, err)
			res, err = b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w9", CheckEntries: true,
				Items: []engine.ClaimItem{{JobID: other.ID, Stream: "noop", MessageID: rec.StreamID}}})
			require.NoError(t, err)
			require.Len(t, res.Claimed, 1, "%+v", res.Refused)
		})
	}
}

// xpendingHook runs do before every pipeline that starts with XPENDING (the claim's check):
// the test's stand-in for a Redis that is slow or hangs.
type xpendingHook struct {
	do func(ctx context.Context) error
}

func (h xpendingHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h xpendingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h xpendingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "xpending" {
			if err := h.do(ctx); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// TestClaimEntryCheckBeforeLocks: the claim asks Redis before it locks a row or starts its
// leases' clock. A slow check costs the granted leases none of their TTL; a Redis that hangs
// fails the claim as unavailable (503) within the check's bound and leaves the job as it was.
func TestClaimEntryCheckBeforeLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SlowCheckKeepsTheTTL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job, item := readOneNoop(t, b, "w1")
		// The check takes 20 s of the engine's clock.
		b.streams.Redis().AddHook(xpendingHook{do: func(context.Context) error { b.clock.Add(20 * time.Second); return nil }})
		before := b.clock.Now()
		res, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", CheckEntries: true,
			Items: []engine.ClaimItem{item}})
		require.NoError(t, err)
		require.Len(t, res.Claimed, 1, "%+v", res.Refused)
		lease := res.Leases[job.ID]
		require.False(t, lease.ExpiresAt.Before(before.Add(20*time.Second+b.cfg.Leases.TTL)),
			"the lease's TTL counts from after the check: expires %s, check ended %s, TTL %s",
			lease.ExpiresAt, before.Add(20*time.Second), b.cfg.Leases.TTL)
	})

	t.Run("HungRedisFailsTheClaimAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		job, item := readOneNoop(t, b, "w1")
		b.streams.Redis().AddHook(xpendingHook{do: func(ctx context.Context) error {
			<-ctx.Done() // hangs until the check gives up
			return ctx.Err()
		}})
		_, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", CheckEntries: true,
			Items: []engine.ClaimItem{item}})
		require.ErrorIs(t, err, streams.ErrUnavailable)
		now, err := b.store.JobGet(ctx, job.ID)
		require.NoError(t, err)
		require.EqualValues(t, "pending", now.Status)
		require.Zero(t, now.Attempts)
	})
}

// readOneNoop submits a noop job and reads its entry as consumer; it returns the job and the
// claim item of that entry.
func readOneNoop(t *testing.T, b *bundle, consumer string) (store.Job, engine.ClaimItem) {
	t.Helper()
	ctx := context.Background()
	group := streams.GroupName("noop")
	require.NoError(t, b.streams.EnsureGroup(ctx, "noop", group))
	job := b.submit(t, "noop")
	ds, err := b.streams.Read(ctx, streams.ReadParams{Group: group, Consumer: consumer, Streams: []string{"noop"}, Count: 10, Block: 5 * time.Second})
	require.NoError(t, err)
	require.NotEmpty(t, ds)
	return job, engine.ClaimItem{JobID: job.ID, Stream: "noop", MessageID: ds[len(ds)-1].ID}
}
