package leases_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
)

// BenchmarkLeaseGrantRelease measures a gpu lease's grant and release against the real
// MariaDB: two transactions, the grant locking the node's GPU rows (SELECT … FOR UPDATE) and
// summing their reservations. The node has two simulated 24 GiB GPUs, as in the concurrency
// test.
//
//   - Serial: one client, back to back; the metric is the latency of grant + release.
//   - Parallel: GOMAXPROCS clients on the same node (grants serialize on its GPU rows).
//   - Paced500: grants issued at 500/s by a pool of clients; p50 and p99 of each grant and
//     each release, as an operator sizing a cluster would read them.
//   - Paced500On8Nodes: the same rate spread over eight nodes, whose grants do not wait for
//     each other (one node's grants are serialized by design).
//
// Run: go test -run '^$' -bench BenchmarkLeaseGrantRelease -benchtime 2000x ./leases/
func BenchmarkLeaseGrantRelease(b *testing.B) {
	st := testenv.MySQLStore(b)
	m, err := leases.New(st, leases.Config{TelemetryFreshness: time.Hour},
		leases.Options{Logger: slog.New(slog.DiscardHandler), NodeID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	nodes := []string{"bench", "bench-1", "bench-2", "bench-3", "bench-4", "bench-5", "bench-6", "bench-7"}
	for _, node := range nodes {
		sim, err := telemetry.NewSimulated(node, "2x24576")
		if err != nil {
			b.Fatal(err)
		}
		snap, _ := sim.Snapshot(context.Background())
		if err := m.RecordSnapshot(context.Background(), snap); err != nil {
			b.Fatal(err)
		}
	}
	var spread atomic.Bool // Paced500On8Nodes: round-robin over the nodes
	var next atomic.Int64
	grantRelease := func(ctx context.Context) (grant, release time.Duration, err error) {
		params := leases.GrantParams{Agent: "bench", Mode: store.LeaseGPU, MemoryMB: 1000, Actor: "agent:bench"}
		if spread.Load() {
			params.NodeID = nodes[next.Add(1)%int64(len(nodes))]
		}
		t0 := time.Now()
		l, err := m.Grant(ctx, params)
		if err != nil {
			return 0, 0, err
		}
		t1 := time.Now()
		_, err = m.Release(ctx, l.Token, "", "agent:bench")
		return t1.Sub(t0), time.Since(t1), err
	}

	b.Run("Serial", func(b *testing.B) {
		ctx := context.Background()
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			g, r, err := grantRelease(ctx)
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, g+r)
		}
		reportPercentiles(b, "pair", lat)
	})

	b.Run("Parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := grantRelease(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})

	b.Run("Paced500", func(b *testing.B) { paced(b, grantRelease) })
	spread.Store(true)
	b.Run("Paced500On8Nodes", func(b *testing.B) { paced(b, grantRelease) })
}

// paced issues b.N grant + release pairs at 500 grants/s from a pool of clients and reports
// the p50 and p99 of grants and of releases.
func paced(b *testing.B, grantRelease func(context.Context) (time.Duration, time.Duration, error)) {
	{
		const rate = 500
		var (
			mu              sync.Mutex
			grants, release []time.Duration
			wg              sync.WaitGroup
			work            = make(chan struct{}, 1024)
		)
		for range 64 {
			wg.Go(func() {
				for range work {
					g, r, err := grantRelease(context.Background())
					if err != nil {
						b.Error(err)
						continue
					}
					mu.Lock()
					grants, release = append(grants, g), append(release, r)
					mu.Unlock()
				}
			})
		}
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		b.ResetTimer()
		for range b.N {
			<-tick.C
			work <- struct{}{}
		}
		close(work)
		wg.Wait()
		b.StopTimer()
		reportPercentiles(b, "grant", grants)
		reportPercentiles(b, "release", release)
	}
}

// reportPercentiles reports the p50 and p99 of lat in milliseconds.
func reportPercentiles(b *testing.B, what string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(p float64) float64 {
		return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), what+"-p50-ms")
	b.ReportMetric(at(0.99), what+"-p99-ms")
}
