package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/store"
)

func TestJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("PreCreatedAtZero", func(t *testing.T) {
		t.Parallel()
		j := metrics.NewJobs([]string{"a", "b"})
		fams := gather(t, registryOf(t, j))
		for _, typ := range []string{"a", "b"} {
			for _, s := range store.JobStatuses {
				require.Zero(t, value(t, fams, "gpu_orchestrator_jobs_total", map[string]string{"type": typ, "status": string(s)}))
			}
			require.Zero(t, sample(t, fams, "gpu_orchestrator_job_wait_seconds", map[string]string{"type": typ}).GetHistogram().GetSampleCount())
			require.Zero(t, sample(t, fams, "gpu_orchestrator_job_latency_seconds", map[string]string{"type": typ}).GetHistogram().GetSampleCount())
		}
	})

	t.Run("CountsCommittedTransitions", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
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

		fams := gather(t, b.om)
		for status, want := range map[store.JobStatus]float64{
			store.JobPending: 1, store.JobClaimed: 1, store.JobRunning: 1, store.JobDone: 1, store.JobFailed: 0,
		} {
			require.Equal(t, want, value(t, fams, "gpu_orchestrator_jobs_total", map[string]string{"type": "noop", "status": string(status)}), status)
		}
		require.EqualValues(t, 1, sample(t, fams, "gpu_orchestrator_job_wait_seconds", map[string]string{"type": "noop"}).GetHistogram().GetSampleCount())
		require.EqualValues(t, 1, sample(t, fams, "gpu_orchestrator_job_latency_seconds", map[string]string{"type": "noop"}).GetHistogram().GetSampleCount())
	})

	t.Run("RolledBackTransactionsCountNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		jobs := metrics.NewJobs([]string{"noop"})
		eng := engine.New(failingAudit{b.st}, b.sc, b.cfg, engine.Options{Logger: quiet, Observer: jobs})
		_, _, err := eng.Submit(ctx, engine.SubmitParams{JobID: uid("job"), Type: "noop", Agent: "tester",
			Payload: []byte(`{}`), Actor: "agent:tester"})
		require.ErrorIs(t, err, errAudit)
		fams := gather(t, registryOf(t, jobs))
		require.Zero(t, value(t, fams, "gpu_orchestrator_jobs_total", map[string]string{"type": "noop", "status": "pending"}),
			"the insert was rolled back with the audit row")
	})

	t.Run("WaitAndRunTimes", func(t *testing.T) {
		t.Parallel()
		j := metrics.NewJobs([]string{"x"})
		j.ObserveJobs([]engine.JobChange{
			{Type: "x", From: store.JobClaimed, To: store.JobRunning, Wait: 3 * time.Second},
			{Type: "x", From: store.JobRunning, To: store.JobFailed, Run: 2 * time.Second},
		})
		fams := gather(t, registryOf(t, j))
		wait := sample(t, fams, "gpu_orchestrator_job_wait_seconds", map[string]string{"type": "x"}).GetHistogram()
		require.InDelta(t, 3.0, wait.GetSampleSum(), 1e-9)
		run := sample(t, fams, "gpu_orchestrator_job_latency_seconds", map[string]string{"type": "x"}).GetHistogram()
		require.InDelta(t, 2.0, run.GetSampleSum(), 1e-9)
		require.Equal(t, 1.0, value(t, fams, "gpu_orchestrator_jobs_total", map[string]string{"type": "x", "status": "failed"}))
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
