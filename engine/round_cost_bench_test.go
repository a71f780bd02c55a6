package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
)

// BenchmarkRoundCost measures what a worker's rounds cost MariaDB and the engine per job.
// One op is one round, as a busy worker makes them: a claim of `batch` jobs that carries the
// results of the previous round's jobs. So a job costs one claim and one completion, each
// shared by the batch. The rounds run one after another, as one reader's do.
//
// It reports server_us/job, the CPU MariaDB spent per job, when MariaDB runs on this host,
// and client_us/job, this process's. On a shared machine these move far less between runs
// than jobs/s does. Batch1 and Batch5 show the fixed cost of a round, Batch50 the cost per
// job, Payload256KiB what a payload's size costs its updates, and Result256KiB what a
// result's size costs its completion, checked as the API hands it over (docs/performance.md).
//
// Run: go test -run '^$' -bench BenchmarkRoundCost -benchtime 200x ./engine/
func BenchmarkRoundCost(b *testing.B) {
	big, _ := json.Marshal(map[string]string{"prompt": strings.Repeat("x", 256<<10)})
	small := json.RawMessage(`{}`)
	for _, tc := range []struct {
		name            string
		batch           int
		payload, output json.RawMessage
	}{
		{"Batch1", 1, small, small},
		{"Batch5", 5, small, small},
		{"Batch50", 50, small, small},
		{"Payload256KiB", 10, big, small},
		{"Result256KiB", 10, small, big},
	} {
		b.Run(tc.name, func(b *testing.B) {
			st, eng := benchEngine(b, nil)
			ctx := context.Background()
			ids := insertRoundJobs(b, st, b.N*tc.batch, tc.payload)
			cpu := testenv.StartCPUMeter(b)
			b.ResetTimer()
			var results []engine.Result
			for batch := range slices.Chunk(ids, tc.batch) {
				results = roundResults(claimRound(b, eng, batch, results), tc.output)
			}
			res, err := eng.Complete(ctx, engine.CompleteParams{WorkerID: "w", Results: results})
			if err != nil || len(res.Outcomes) != len(results) {
				b.Fatalf("complete the last round: %v, %d outcomes", err, len(res.Outcomes))
			}
			b.StopTimer()
			jobs := float64(len(ids))
			b.ReportMetric(jobs/b.Elapsed().Seconds(), "jobs/s")
			cpu.Report(b, jobs)
		})
	}
}

// claimRound is one worker round: a claim of the jobs ids, all of which it must take, that
// carries results. It returns the jobs claimed.
func claimRound(b *testing.B, eng *engine.Engine, ids []string, results []engine.Result) []store.Job {
	b.Helper()
	items := make([]engine.ClaimItem, len(ids))
	for i, id := range ids {
		items[i] = engine.ClaimItem{JobID: id}
	}
	res, err := eng.Claim(context.Background(), engine.ClaimParams{WorkerID: "w", Items: items, Results: results})
	if err != nil {
		b.Fatal(err)
	}
	if len(res.Claimed) != len(ids) {
		b.Fatalf("claimed %d of %d: %+v", len(res.Claimed), len(ids), res.Refused)
	}
	return res.Claimed
}

// insertRoundJobs inserts n pending jobs with payload, a few at a time (so that a packet of
// large payloads stays within max_allowed_packet), and returns their ids.
func insertRoundJobs(b *testing.B, st store.Store, n int, payload json.RawMessage) []string {
	b.Helper()
	ids := make([]string, n)
	ps := make([]store.JobInsertParams, 0, 20)
	now := time.Now()
	for i := range ids {
		ids[i] = fmt.Sprintf("round-%08d", i)
		ps = append(ps, store.JobInsertParams{ID: ids[i], Type: "noop", Agent: "bench", Payload: payload,
			MaxAttempts: 3, Timeout: time.Minute, Now: now})
		if len(ps) == cap(ps) || i == n-1 {
			if _, err := st.JobInsertMany(context.Background(), ps); err != nil {
				b.Fatal(err)
			}
			ps = ps[:0]
		}
	}
	return ids
}

// roundResults are the results a worker reports for jobs it has just run, as the API hands
// them to the engine: done, with the start folded in, the output decoded from JSON.
func roundResults(claimed []store.Job, output json.RawMessage) []engine.Result {
	results := make([]engine.Result, len(claimed))
	for i, job := range claimed {
		results[i] = engine.Result{JobID: job.ID, Attempt: job.Attempts, LeaseToken: job.LeaseToken, Done: true,
			Output: output, OutputChecked: true, Elapsed: time.Millisecond}
	}
	return results
}
