package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/telemetry"
)

// benchEngine is an engine on the real MariaDB and Redis with the default configuration,
// changed by edit when not nil.
func benchEngine(b *testing.B, edit func(*config.Config)) (store.Store, *engine.Engine) {
	s := newBenchStack(b, edit)
	return s.st, s.eng
}

// benchStack is an engine over a fresh database and Redis prefix, with its backends.
type benchStack struct {
	st  store.Store
	sc  *streams.Client
	lm  *leases.Manager
	eng *engine.Engine
}

func newBenchStack(b *testing.B, edit func(*config.Config)) benchStack {
	st := testenv.MySQLStore(b)
	cfg, err := config.Load("", func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	rdb := streams.NewRedis(testenv.RedisAddr(b), "")
	b.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(b)})
	quiet := slog.New(slog.DiscardHandler)
	lm := engine.NewLeaseManager(st, cfg, leases.Options{Logger: quiet})
	return benchStack{st: st, sc: sc, lm: lm, eng: engine.New(st, sc, cfg, engine.Options{Logger: quiet, Leases: lm})}
}

// BenchmarkClaim measures claim throughput against the real MariaDB: one op is one worker's
// claim call of 50 jobs (the rows locked, a lease per job, the audit rows, one transaction).
// GPU jobs also lock the node's GPU rows and place every lease; CPU jobs are placed nowhere.
// The jobs/s metric is the figure to compare.
//
// Run: go test -run '^$' -bench BenchmarkClaim -benchtime 200x ./engine/
func BenchmarkClaim(b *testing.B) {
	for _, tc := range []struct {
		name  string
		gpuMB int
	}{{"CPU", 0}, {"GPU", 10}} {
		b.Run(tc.name, func(b *testing.B) {
			const batch = 50
			bs := newBenchStack(b, func(cfg *config.Config) {
				cfg.Leases.TelemetryFreshness = time.Hour
				cfg.JobTypes["noop"].GPUMemoryMB = tc.gpuMB
			})
			st, eng := bs.st, bs.eng
			ctx := context.Background()
			// 8 nodes of 8 × 80 GB: room for every job's lease.
			for n := range 8 {
				sim, _ := telemetry.NewSimulated(fmt.Sprintf("node-%d", n), "8x81920")
				snap, _ := sim.Snapshot(ctx)
				if err := bs.lm.RecordSnapshot(ctx, snap); err != nil {
					b.Fatal(err)
				}
			}
			ids := make([]string, b.N*batch)
			now := time.Now()
			for i := range ids {
				ids[i] = fmt.Sprintf("bench-%08d", i)
				if _, _, err := st.JobInsert(ctx, store.JobInsertParams{ID: ids[i], Type: "noop", Agent: "bench",
					Payload: json.RawMessage(`{}`), MaxAttempts: 3, GPUMemoryMB: tc.gpuMB, Timeout: time.Minute, Now: now}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				items := make([]engine.ClaimItem, batch)
				for j := range items {
					items[j] = engine.ClaimItem{JobID: ids[i*batch+j]}
				}
				res, err := eng.Claim(ctx, engine.ClaimParams{WorkerID: "w", NodeID: fmt.Sprintf("node-%d", i%8), Items: items})
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Claimed) != batch {
					b.Fatalf("claimed %d of %d: %+v", len(res.Claimed), batch, res.Refused[:min(3, len(res.Refused))])
				}
			}
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "jobs/s")
		})
	}
}

// BenchmarkClaimInFlight measures what a worker's in-flight list costs a claim: one op is a
// claim of one job by a worker already running 50 jobs whose payloads are 256 KiB each, so
// every call asks which of those 50 were cancelled.
//
// Run: go test -run '^$' -bench BenchmarkClaimInFlight -benchtime 200x ./engine/
func BenchmarkClaimInFlight(b *testing.B) {
	const running = 50
	st, eng := benchEngine(b, nil)
	ctx := context.Background()
	payload, _ := json.Marshal(map[string]string{"prompt": strings.Repeat("x", 256<<10)})
	now := time.Now()
	insert := func(id string, payload json.RawMessage) {
		if _, _, err := st.JobInsert(ctx, store.JobInsertParams{ID: id, Type: "noop", Agent: "bench",
			Payload: payload, MaxAttempts: 3, Timeout: time.Minute, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	inFlight := make([]string, running)
	items := make([]engine.ClaimItem, running)
	for i := range inFlight {
		inFlight[i] = fmt.Sprintf("big-%03d", i)
		insert(inFlight[i], payload)
		items[i] = engine.ClaimItem{JobID: inFlight[i]}
	}
	if res, err := eng.Claim(ctx, engine.ClaimParams{WorkerID: "w", Items: items}); err != nil || len(res.Claimed) != running {
		b.Fatalf("claim the running jobs: %v, %d claimed", err, len(res.Claimed))
	}
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("small-%08d", i)
		insert(ids[i], json.RawMessage(`{}`))
	}
	b.ResetTimer()
	for i := range b.N {
		res, err := eng.Claim(ctx, engine.ClaimParams{WorkerID: "w", Items: []engine.ClaimItem{{JobID: ids[i]}}, InFlight: inFlight})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Claimed) != 1 || len(res.Cancel) != 0 {
			b.Fatalf("claimed %d, cancel %v", len(res.Claimed), res.Cancel)
		}
	}
}

// BenchmarkCompletePayloads measures a completion of jobs with large payloads: one op is a
// worker's completion call of 10 jobs of 256 KiB each (their claim is not timed).
//
// Run: go test -run '^$' -bench BenchmarkCompletePayloads -benchtime 50x ./engine/
func BenchmarkCompletePayloads(b *testing.B) {
	const batch = 10
	st, eng := benchEngine(b, nil)
	ctx := context.Background()
	payload, _ := json.Marshal(map[string]string{"prompt": strings.Repeat("x", 256<<10)})
	now := time.Now()
	ids := make([]string, b.N*batch)
	for i := range ids {
		ids[i] = fmt.Sprintf("big-%08d", i)
		if _, _, err := st.JobInsert(ctx, store.JobInsertParams{ID: ids[i], Type: "noop", Agent: "bench",
			Payload: payload, MaxAttempts: 3, Timeout: time.Minute, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		items := make([]engine.ClaimItem, batch)
		for j := range items {
			items[j] = engine.ClaimItem{JobID: ids[i*batch+j]}
		}
		claimed, err := eng.Claim(ctx, engine.ClaimParams{WorkerID: "w", Items: items})
		if err != nil || len(claimed.Claimed) != batch {
			b.Fatalf("claim: %v, %d claimed", err, len(claimed.Claimed))
		}
		results := make([]engine.Result, batch)
		for j, job := range claimed.Claimed {
			results[j] = engine.Result{JobID: job.ID, Attempt: 1, LeaseToken: job.LeaseToken, Done: true}
		}
		b.StartTimer()
		res, err := eng.Complete(ctx, engine.CompleteParams{WorkerID: "w", Results: results})
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range res.Outcomes {
			if o.Outcome != engine.OutcomeDone {
				b.Fatalf("outcome %+v", o)
			}
		}
	}
}

// BenchmarkDispatchPayloads measures the dispatcher publishing jobs with large payloads, as
// after a Redis outage: one op is one pass over 500 unpublished jobs of 64 KiB each.
//
// Run: go test -run '^$' -bench BenchmarkDispatchPayloads -benchtime 10x ./engine/
func BenchmarkDispatchPayloads(b *testing.B) {
	const batch = 500
	st, eng := benchEngine(b, nil)
	disp := outbox.NewDispatcher(eng, outbox.DispatcherConfig{Batch: batch})
	ctx := context.Background()
	payload, _ := json.Marshal(map[string]string{"prompt": strings.Repeat("x", 64<<10)})
	ps := make([]store.JobInsertParams, batch)
	for i := range b.N {
		b.StopTimer()
		for j := range ps {
			ps[j] = store.JobInsertParams{ID: fmt.Sprintf("big-%04d-%04d", i, j), Type: "noop", Agent: "bench",
				Payload: payload, MaxAttempts: 3, Timeout: time.Minute, Now: time.Now().Add(-time.Second)}
		}
		for chunk := range slices.Chunk(ps, 50) { // within max_allowed_packet
			if _, err := st.JobInsertMany(ctx, chunk); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		n, err := disp.RunOnce(ctx)
		if err != nil || n != batch {
			b.Fatalf("published %d of %d: %v", n, batch, err)
		}
	}
}

// BenchmarkClaimProven measures what proving the items costs a claim (ClaimParams.CheckEntries,
// what every claim through the API asks): one op is a claim call of `batch` jobs whose entries
// the worker read but whose stream_id is not recorded yet (the submit's mark lags), so every
// item is proven by the XPENDING pipeline; "Unproven" is the same claim without the check.
//
// Run: go test -run '^$' -bench BenchmarkClaimProven -benchtime 300x ./engine/
func BenchmarkClaimProven(b *testing.B) {
	for _, batch := range []int{1, 50} {
		for _, check := range []bool{false, true} {
			name := fmt.Sprintf("Batch%d/Unproven", batch)
			if check {
				name = fmt.Sprintf("Batch%d/Proven", batch)
			}
			b.Run(name, func(b *testing.B) {
				bs := newBenchStack(b, nil)
				st, eng, sc := bs.st, bs.eng, bs.sc
				ctx := context.Background()
				group := streams.GroupName("noop")
				if err := sc.EnsureGroup(ctx, "noop", group); err != nil {
					b.Fatal(err)
				}
				n := b.N * batch
				now := time.Now()
				msgs := make([]streams.Message, n)
				for i := range msgs {
					id := fmt.Sprintf("proven-%08d", i)
					if _, _, err := st.JobInsert(ctx, store.JobInsertParams{ID: id, Type: "noop", Agent: "bench",
						Payload: json.RawMessage(`{}`), MaxAttempts: 3, Timeout: time.Minute, Now: now}); err != nil {
						b.Fatal(err)
					}
					msgs[i] = streams.Message{Stream: "noop", JobID: id, Type: "noop"}
				}
				for i := 0; i < n; i += 1000 {
					if _, err := sc.Publish(ctx, msgs[i:min(i+1000, n)]); err != nil {
						b.Fatal(err)
					}
				}
				var ds []streams.Delivery
				for len(ds) < n {
					got, err := sc.Read(ctx, streams.ReadParams{Group: group, Consumer: "w", Streams: []string{"noop"}, Count: 1000, Block: time.Second})
					if err != nil {
						b.Fatal(err)
					}
					ds = append(ds, got...)
				}
				b.ResetTimer()
				start := time.Now()
				for i := range b.N {
					items := make([]engine.ClaimItem, batch)
					for j := range items {
						d := ds[i*batch+j]
						items[j] = engine.ClaimItem{JobID: d.JobID, Stream: d.Stream, MessageID: d.ID}
					}
					res, err := eng.Claim(ctx, engine.ClaimParams{WorkerID: "w", Items: items, CheckEntries: check})
					if err != nil {
						b.Fatal(err)
					}
					if len(res.Claimed) != batch {
						b.Fatalf("claimed %d of %d: %+v", len(res.Claimed), batch, res.Refused[:min(3, len(res.Refused))])
					}
				}
				b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "jobs/s")
			})
		}
	}
}
