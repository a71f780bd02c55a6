package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
)

// goalJobsPerSec is the burn-down rate the performance issue asks for (docs/performance.md).
const goalJobsPerSec = 15000

// BenchmarkJobFloor measures the least CPU MariaDB spends on a job's whole life, submit to
// done, when every statement carries so many jobs that the fixed cost of statements, round
// trips and commits is spread thin: what is left is what the rows cost. One op is one job; the
// jobs go in batches, each submitted, then claimed by a round that carries the previous
// batch's results, as a busy worker's rounds do.
//
//   - Engine: the engine's own path (SubmitMany, then Claim with results), every row the
//     design writes: the job row inserted, marked enqueued, claimed and finished; a lease
//     inserted and released; four audit rows.
//   - JobRowOnly: the same batches writing the job row alone, inserted and updated twice
//     (claimed, then done), as River writes its one row per job: what MariaDB charges for a
//     job's row with the table's indexes, and no lease, audit row or mark.
//
// Besides server_us/job and client_us/job (testenv.CPUMeter) it reports mariadb_cores@15k,
// the cores MariaDB alone would be busy at the goal's 15,000 jobs/s if every job cost what
// it did here. Needs MariaDB on this host for the server figures.
//
// Run: go test -run '^$' -bench BenchmarkJobFloor -benchtime 10000x ./engine/
func BenchmarkJobFloor(b *testing.B) {
	for _, batch := range []int{20, 50, 200, 500} {
		b.Run(fmt.Sprintf("Engine/Batch%d", batch), func(b *testing.B) {
			_, eng := benchEngine(b, nil)
			floorRun(b, batch, engineLife(eng))
		})
		b.Run(fmt.Sprintf("JobRowOnly/Batch%d", batch), func(b *testing.B) {
			st, _ := benchEngine(b, nil)
			floorRun(b, batch, rowOnlyLife(st))
		})
	}
}

// floorRun times b.N jobs (rounded up to whole batches) through life, and reports per job.
func floorRun(b *testing.B, batch int, life func(b *testing.B, ids []string, last bool)) {
	pid := testenv.MySQLServerPID(b)
	cpu := testenv.StartCPUMeter(b)
	server0 := testenv.ProcessCPU(pid)
	seq := 0
	b.ResetTimer()
	rounds := (b.N + batch - 1) / batch
	for i := range rounds {
		ids := make([]string, batch)
		for k := range ids {
			seq++
			ids[k] = fmt.Sprintf("floor-%09d", seq)
		}
		life(b, ids, i == rounds-1)
	}
	b.StopTimer()
	jobs := float64(rounds * batch)
	b.ReportMetric(jobs/b.Elapsed().Seconds(), "jobs/s")
	cpu.Report(b, jobs)
	if server0 >= 0 {
		perJob := (testenv.ProcessCPU(pid) - server0).Seconds() / jobs
		b.ReportMetric(perJob*goalJobsPerSec, "mariadb_cores@15k")
	}
}

// engineLife submits ids through the engine and claims them in one round that carries the
// results of the previous batch; the last batch's results are completed on their own.
func engineLife(eng *engine.Engine) func(b *testing.B, ids []string, last bool) {
	var results []engine.Result
	return func(b *testing.B, ids []string, last bool) {
		ctx := context.Background()
		ps := make([]engine.SubmitParams, len(ids))
		for i, id := range ids {
			ps[i] = engine.SubmitParams{JobID: id, Type: "noop", Agent: "bench", Payload: json.RawMessage(`{}`),
				Actor: "agent:bench"}
		}
		for _, out := range eng.SubmitMany(ctx, ps) {
			if out.Err != nil {
				b.Fatal(out.Err)
			}
		}
		eng.FlushMarks(ctx)
		results = roundResults(claimRound(b, eng, ids, results), json.RawMessage(`{}`))
		if last {
			out, err := eng.Complete(ctx, engine.CompleteParams{WorkerID: "w", Results: results})
			if err != nil || len(out.Outcomes) != len(results) {
				b.Fatalf("complete the last batch: %v, %d outcomes", err, len(out.Outcomes))
			}
		}
	}
}

// rowOnlyLife inserts ids and moves them to claimed in one transaction, and moves the previous
// batch to done in the same one, as engineLife's round does, with nothing but the job rows.
func rowOnlyLife(st store.Store) func(b *testing.B, ids []string, last bool) {
	var claimed []string
	return func(b *testing.B, ids []string, last bool) {
		ctx := context.Background()
		now := time.Now()
		ps := make([]store.JobInsertParams, len(ids))
		for i, id := range ids {
			ps[i] = store.JobInsertParams{ID: id, Type: "noop", Agent: "bench", Payload: json.RawMessage(`{}`),
				MaxAttempts: 3, Timeout: time.Minute, Now: now}
		}
		if _, err := st.JobInsertMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
		done := claimed
		claimed = ids
		err := st.WithTx(ctx, func(tx store.Tx) error {
			if len(done) > 0 {
				if err := tx.JobUpdateMany(ctx, finishUpdates(done, now)); err != nil {
					return err
				}
			}
			return tx.JobUpdateMany(ctx, claimUpdates(ids, now))
		})
		if err == nil && last {
			err = st.WithTx(ctx, func(tx store.Tx) error { return tx.JobUpdateMany(ctx, finishUpdates(ids, now)) })
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// claimUpdates are the claim's writes of the job rows: pending → claimed, attempt, worker and
// lease token, as the engine's claim sets them.
func claimUpdates(ids []string, now time.Time) []store.JobUpdate {
	one, worker, token := 1, "w", "lease-token-of-the-claim"
	us := make([]store.JobUpdate, len(ids))
	for i, id := range ids {
		us[i] = store.JobUpdate{ID: id, From: store.JobPending, To: store.JobClaimed, Attempts: &one,
			WorkerID: &worker, LeaseToken: &token, Now: now}
	}
	return us
}

// finishUpdates are a result's writes of the job rows: claimed → done with the start folded in,
// the output, and the lease token cleared, as the engine's completion sets them.
func finishUpdates(ids []string, now time.Time) []store.JobUpdate {
	empty := ""
	us := make([]store.JobUpdate, len(ids))
	for i, id := range ids {
		us[i] = store.JobUpdate{ID: id, From: store.JobClaimed, To: store.JobDone, LeaseToken: &empty,
			Result: json.RawMessage(`{}`), StartedAt: &now, FinishedAt: &now, Now: now}
	}
	return us
}
