package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/gpuorch/orchestrator/wire"
)

// BenchmarkSubmitBatch measures one POST /jobs/submit_batch of 1,000 no-op jobs through the
// whole handler (auth, decoding, admission, the engine's transactions and XADDs against the
// real MariaDB and Redis). Its B/op, the request's own encoding included, is what a bulk fill
// allocates per request. That sets the orchestrator's memory peak during a fill
// (docs/performance-history.md, "Memory after a bulk fill"):
//
//	go test -run '^$' -bench BenchmarkSubmitBatch -benchtime 20x -benchmem ./api/
func BenchmarkSubmitBatch(b *testing.B) {
	const batch = 1000
	bn := setup(b)
	seq := 0
	for b.Loop() {
		b.StopTimer()
		req := wire.SubmitBatchRequest{Jobs: make([]wire.SubmitRequest, batch)}
		for i := range req.Jobs {
			seq++
			req.Jobs[i] = wire.SubmitRequest{JobID: fmt.Sprintf("batch-%09d", seq), Type: "noop", Agent: "alice",
				Payload: json.RawMessage(`{}`)}
		}
		b.StartTimer()
		rec := serve(b, bn, http.MethodPost, "/jobs/submit_batch", "admin", req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %.200s", rec.Code, rec.Body.String())
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}
