package mysql_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/mysql"
)

// BenchmarkSubmitCost measures what one submitted job costs MariaDB and this process, the
// floor under the orchestrator's throughput (docs/performance.md): the submit transaction as
// the engine writes it (the job rows, their audit rows, the enqueued marks, one commit) for
// batches of 1 and 4 jobs, next to a lone autocommit INSERT of a job row, from 8 goroutines.
// server_us/job is the CPU MariaDB spent per job when it runs on this host (read from /proc
// through its pid file, testenv.MySQLServerPID; absent otherwise), client_us/job this process's.
//
// Run: go test -run '^$' -bench BenchmarkSubmitCost -benchtime 4000x ./store/mysql/
func BenchmarkSubmitCost(b *testing.B) {
	s, _ := setup(b, mysql.Options{MaxOpenConns: 8, MaxIdleConns: 8})
	var seq atomic.Int64
	for _, tc := range []struct {
		name  string
		batch int
		tx    bool
	}{{"Autocommit", 1, false}, {"Tx1", 1, true}, {"Tx4", 4, true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetParallelism(4) // 8 goroutines on 2 CPUs
			cpu := testenv.StartCPUMeter(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := submitBatch(b, s, &seq, tc.batch, tc.tx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			jobs := float64(b.N * tc.batch)
			b.ReportMetric(jobs/b.Elapsed().Seconds(), "jobs/s")
			cpu.Report(b, jobs)
		})
	}
}

// submitBatch writes n new jobs as the engine's submit does, or (tx false, n 1) the job row
// alone.
func submitBatch(b *testing.B, s *mysql.Store, seq *atomic.Int64, n int, tx bool) error {
	now := time.Now()
	ps := make([]store.JobInsertParams, n)
	for i := range ps {
		ps[i] = store.JobInsertParams{ID: fmt.Sprintf("cost-%d-%d", os.Getpid(), seq.Add(1)), Type: "noop",
			Agent: "bench", Payload: []byte(`{}`), MaxAttempts: 3, Now: now}
	}
	if !tx {
		_, _, err := s.JobInsert(b.Context(), ps[0])
		return err
	}
	return s.WithTx(b.Context(), func(tx store.Tx) error {
		jobs, err := tx.JobInsertMany(b.Context(), ps)
		if err != nil {
			return err
		}
		events := make([]store.AuditEvent, n)
		marks := make([]store.JobEnqueued, n)
		for i, j := range jobs {
			events[i] = store.AuditEvent{TS: now, EventType: "job.submitted", JobID: j.ID, Actor: "agent:bench",
				Details: []byte(`{"agent":"bench","max_attempts":3,"type":"noop"}`)}
			marks[i] = store.JobEnqueued{ID: j.ID, StreamID: fmt.Sprintf("%d-%d", now.UnixMilli(), i)}
		}
		if err := tx.AuditInsert(b.Context(), events); err != nil {
			return err
		}
		_, err = tx.JobMarkEnqueued(b.Context(), marks)
		return err
	})
}
