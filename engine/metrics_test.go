package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/metrics/metricstest"
	"github.com/gpuorch/orchestrator/store"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("PreCreatedAtZero", func(t *testing.T) {
		t.Parallel()
		m := engine.NewMetrics([]string{"a", "b"})
		fams := metricstest.Gather(t, metricstest.Registry(t, m))
		for _, typ := range []string{"a", "b"} {
			for _, s := range store.JobStatuses {
				require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_jobs_total", map[string]string{"type": typ, "status": string(s)}))
			}
			require.Zero(t, metricstest.Sample(t, fams, "gpu_orchestrator_job_wait_seconds", map[string]string{"type": typ}).GetHistogram().GetSampleCount())
			require.Zero(t, metricstest.Sample(t, fams, "gpu_orchestrator_job_latency_seconds", map[string]string{"type": typ}).GetHistogram().GetSampleCount())
			require.Zero(t, metricstest.Sample(t, fams, "gpu_orchestrator_schedule_wait_seconds", map[string]string{"type": typ}).GetHistogram().GetSampleCount())
		}
	})

	t.Run("GPUJobsTimeTheirPlacement", func(t *testing.T) {
		// A GPU job's claim (its GPUs leased) is observed in schedule_wait_seconds; a CPU
		// job's is not.
		t.Parallel()
		b := setup(t)
		b.gpuType(1000, 3)
		m := engine.NewMetrics(b.cfg.TypeNames())
		b.eng = engine.New(b.store, b.streams, b.cfg, engine.Options{Logger: slog.New(slog.DiscardHandler), Observer: m,
			Now: b.clock.Now, Leases: b.leases})
		node := uid("node")
		b.report(t, node, 24576)
		gpu, cpu := b.submit(t, "gpu"), b.submit(t, "noop")
		b.clock.Add(3 * time.Second)
		res := b.claimOn(t, "w1", node, gpu.ID, cpu.ID)
		require.Len(t, res.Claimed, 2)
		fams := metricstest.Gather(t, metricstest.Registry(t, m))
		placed := metricstest.Sample(t, fams, "gpu_orchestrator_schedule_wait_seconds", map[string]string{"type": "gpu"}).GetHistogram()
		require.EqualValues(t, 1, placed.GetSampleCount())
		require.InDelta(t, 3.0, placed.GetSampleSum(), 0.001, "submit to placement on the engine clock")
		require.Zero(t, metricstest.Sample(t, fams, "gpu_orchestrator_schedule_wait_seconds", map[string]string{"type": "noop"}).GetHistogram().GetSampleCount())
	})

	t.Run("CountsCommittedTransitions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		m := engine.NewMetrics(b.cfg.TypeNames())
		b.eng = engine.New(b.store, b.streams, b.cfg, engine.Options{Logger: slog.New(slog.DiscardHandler), Observer: m})
		job := b.submit(t, "noop")
		res, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", NodeID: b.cfg.NodeID,
			Items: []engine.ClaimItem{{JobID: job.ID, Stream: "noop"}}})
		require.NoError(t, err)
		require.Len(t, res.Claimed, 1)
		_, err = b.eng.Start(ctx, engine.StartParams{WorkerID: "w1", JobIDs: []string{job.ID}})
		require.NoError(t, err)
		_, err = b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: job.ID, Attempt: 1, LeaseToken: res.Leases[job.ID].Token, Done: true},
		}})
		require.NoError(t, err)

		fams := metricstest.Gather(t, metricstest.Registry(t, m))
		for status, want := range map[store.JobStatus]float64{
			store.JobPending: 1, store.JobClaimed: 1, store.JobRunning: 1, store.JobDone: 1, store.JobFailed: 0,
		} {
			require.Equal(t, want, metricstest.Value(t, fams, "gpu_orchestrator_jobs_total", map[string]string{"type": "noop", "status": string(status)}), status)
		}
		require.EqualValues(t, 1, metricstest.Sample(t, fams, "gpu_orchestrator_job_wait_seconds", map[string]string{"type": "noop"}).GetHistogram().GetSampleCount())
		require.EqualValues(t, 1, metricstest.Sample(t, fams, "gpu_orchestrator_job_latency_seconds", map[string]string{"type": "noop"}).GetHistogram().GetSampleCount())
	})

	t.Run("RolledBackTransactionsCountNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		m := engine.NewMetrics([]string{"noop"})
		eng := engine.New(failingAudit{b.store}, b.streams, b.cfg, engine.Options{Logger: slog.New(slog.DiscardHandler), Observer: m})
		_, _, err := eng.Submit(ctx, engine.SubmitParams{JobID: uid("job"), Type: "noop", Agent: "tester",
			Payload: []byte(`{}`), Actor: "agent:tester"})
		require.ErrorIs(t, err, errAudit)
		fams := metricstest.Gather(t, metricstest.Registry(t, m))
		require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_jobs_total", map[string]string{"type": "noop", "status": "pending"}),
			"the insert was rolled back with the audit row")
	})

	t.Run("WaitAndRunTimes", func(t *testing.T) {
		t.Parallel()
		m := engine.NewMetrics([]string{"x"})
		m.ObserveJobs([]engine.JobChange{
			{Type: "x", From: store.JobClaimed, To: store.JobRunning, Wait: 3 * time.Second},
			{Type: "x", From: store.JobRunning, To: store.JobFailed, Run: 2 * time.Second},
		})
		fams := metricstest.Gather(t, metricstest.Registry(t, m))
		wait := metricstest.Sample(t, fams, "gpu_orchestrator_job_wait_seconds", map[string]string{"type": "x"}).GetHistogram()
		require.InDelta(t, 3.0, wait.GetSampleSum(), 1e-9)
		run := metricstest.Sample(t, fams, "gpu_orchestrator_job_latency_seconds", map[string]string{"type": "x"}).GetHistogram()
		require.InDelta(t, 2.0, run.GetSampleSum(), 1e-9)
		require.Equal(t, 1.0, metricstest.Value(t, fams, "gpu_orchestrator_jobs_total", map[string]string{"type": "x", "status": "failed"}))
	})
}

var errAudit = errors.New("audit table is gone")

// failingAudit is a store whose transactions fail at their audit insert, after the job rows
// were written: the engine's transaction rolls back.
type failingAudit struct{ store.Store }

func (s failingAudit) WithTx(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.WithTx(ctx, func(tx store.Tx) error { return fn(failingAuditTx{tx}) })
}

type failingAuditTx struct{ store.Tx }

func (failingAuditTx) AuditInsert(context.Context, []store.AuditEvent) error { return errAudit }

func TestDLQDepthCollector(t *testing.T) {
	t.Parallel()

	t.Run("LengthOfTheDeadLetterStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := metrics.NewRegistry(slog.New(slog.DiscardHandler))
		reg.MustRegister(engine.NewDLQDepthCollector(reg, b.streams))
		require.Zero(t, metricstest.Value(t, metricstest.Gather(t, reg), "gpu_orchestrator_dlq_depth", nil), "no stream yet: 0")
		b.deadLetter(t)
		require.Equal(t, 1, b.relay(t))
		fams := metricstest.Gather(t, reg)
		require.Equal(t, 1.0, metricstest.Value(t, fams, "gpu_orchestrator_dlq_depth", nil))
		require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_collector_errors_total", map[string]string{"collector": "dlq"}))
	})

	t.Run("RedisDownFailsTheFamilyOnly", func(t *testing.T) {
		t.Parallel()
		reg := metrics.NewRegistry(slog.New(slog.DiscardHandler))
		reg.MustRegister(engine.NewDLQDepthCollector(reg, downStreams{}))
		fams := metricstest.GatherFailing(t, reg)
		require.NotContains(t, fams, "gpu_orchestrator_dlq_depth")
		require.GreaterOrEqual(t, metricstest.ScrapeErrors(t, reg, "dlq"), 1.0, "the failed read is counted")
		require.Contains(t, fams, "go_goroutines", "the other families are served")
	})
}

type downStreams struct{}

func (downStreams) Len(context.Context, string) (int64, error) { return 0, errors.New("redis is down") }
