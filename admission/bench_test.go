package admission

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkAdmitJob measures one admission decision against the real MariaDB and Redis on
// loopback, reporting the p50/p99 latency besides ns/op:
//
//	go test -run '^$' -bench BenchmarkAdmitJob -benchtime 20000x ./admission/
//
// Bucket: one EVALSHA of the GCRA per decision (an agent below 100/s is never batched; the
// burst is large so that the bucket never empties). BucketBatched: an agent of 10^6/s, whose
// tokens are taken in batches (tokenStash). MaxPending: Bucket plus the bounded count of the
// agent's unfinished jobs (100 of them, cap 1000). RateLimited: a refusal (the bucket is
// empty). GPUGateClosed: refused by the gate, no I/O.
func BenchmarkAdmitJob(b *testing.B) {
	for _, bc := range []struct {
		name    string
		prepare func(t *testing.B, bn *bundle) JobRequest
	}{
		{"Bucket", func(t *testing.B, bn *bundle) JobRequest {
			bn.setPolicy(t, "steady", 99, 1e7, 0)
			return JobRequest{Agent: "steady", Type: "noop"}
		}},
		{"BucketBatched", func(t *testing.B, bn *bundle) JobRequest {
			bn.setPolicy(t, "fast", 1e6, 1e7, 0)
			return JobRequest{Agent: "fast", Type: "noop"}
		}},
		{"MaxPending", func(t *testing.B, bn *bundle) JobRequest {
			bn.setPolicy(t, "capped", 99, 1e7, 1000)
			for i := range 100 {
				bn.insertJob(t, fmt.Sprintf("bench-%d", i), "capped", "noop")
			}
			return JobRequest{Agent: "capped", Type: "noop"}
		}},
		{"RateLimited", func(t *testing.B, bn *bundle) JobRequest {
			bn.setPolicy(t, "slow", 0.001, 1, 0)
			return JobRequest{Agent: "slow", Type: "noop"}
		}},
		{"GPUGateClosed", func(_ *testing.B, bn *bundle) JobRequest {
			bn.c.gpu.Observe(Pressure{MeasuredAt: bn.clock.Now(), Ratio: 0.99, FreshGPUs: 1, UsedMB: 99, TotalMB: 100})
			return JobRequest{Agent: "any", Type: "gpu"}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bn := setup(b, "")
			req := bc.prepare(b, bn)
			ctx := b.Context()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				if _, err := bn.c.AdmitJob(ctx, req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			reportPercentiles(b, lat)
		})
	}
}

// BenchmarkAdmitJobParallel is the Bucket case from many goroutines (the API serves
// requests concurrently); p99 is per decision.
func BenchmarkAdmitJobParallel(b *testing.B) {
	bn := setup(b, "")
	bn.setPolicy(b, "steady", 99, 1e7, 0)
	req := JobRequest{Agent: "steady", Type: "noop"}
	ctx := b.Context()
	lats := make(chan []time.Duration, 64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var lat []time.Duration
		for pb.Next() {
			start := time.Now()
			if _, err := bn.c.AdmitJob(ctx, req); err != nil {
				b.Error(err)
				return
			}
			lat = append(lat, time.Since(start))
		}
		lats <- lat
	})
	b.StopTimer()
	close(lats)
	var all []time.Duration
	for l := range lats {
		all = append(all, l...)
	}
	reportPercentiles(b, all)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}
