package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// TestClaimCarriesResults covers a worker round in one call: the results are recorded as a
// completion records them, then the claim is made, in one transaction.
func TestClaimCarriesResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RecordsResultsThenClaims", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		done, failed, next := b.submit(t, "noop"), b.submit(t, "noop"), b.submit(t, "noop")
		first := b.claim(t, "w1", done.ID, failed.ID)
		tokDone, tokFailed := first.Leases[done.ID].Token, first.Leases[failed.ID].Token

		res, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1",
			Items: []engine.ClaimItem{{JobID: next.ID, Stream: "noop"}},
			Results: []engine.Result{
				{JobID: done.ID, Attempt: 1, LeaseToken: tokDone, Done: true, Output: json.RawMessage(`{"ok":1}`)},
				{JobID: failed.ID, Attempt: 1, LeaseToken: tokFailed, Error: "boom"},
			}})
		require.NoError(t, err)
		require.Equal(t, []engine.Outcome{
			{JobID: done.ID, Outcome: engine.OutcomeDone, Status: store.JobDone},
			{JobID: failed.ID, Outcome: engine.OutcomeRetry, Status: store.JobPending},
		}, res.Outcomes)
		require.Len(t, res.Claimed, 1)
		require.Equal(t, next.ID, res.Claimed[0].ID)
		require.JSONEq(t, string(next.Payload), string(res.Claimed[0].Payload), "a claimed job comes with its payload")
		require.Empty(t, res.Refused)

		require.Equal(t, store.JobDone, b.job(t, done.ID).Status)
		require.Equal(t, store.LeaseReleased, b.lease(t, tokDone).Status)
		require.Equal(t, store.LeaseReleased, b.lease(t, tokFailed).Status)
		require.Equal(t, store.JobClaimed, b.job(t, next.ID).Status)
		require.Equal(t, store.LeaseActive, b.lease(t, res.Leases[next.ID].Token).Status)
		require.Equal(t, []string{engine.EventSubmitted, "job.pending->claimed",
			"job.claimed->running", "job.running->done"}, b.auditTypes(t, done.ID),
			"the same trail as a completion of its own")
	})

	t.Run("ExpiredLeaseIsAnOutcomeAndTheClaimStands", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old, next := b.submit(t, "noop"), b.submit(t, "noop")
		tok := b.claim(t, "w1", old.ID).Claimed[0].LeaseToken
		b.clock.Add(b.cfg.Leases.TTL + time.Second) // the lease of old expired unrenewed

		res, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1",
			Items:   []engine.ClaimItem{{JobID: next.ID, Stream: "noop"}},
			Results: []engine.Result{{JobID: old.ID, Attempt: 1, LeaseToken: tok, Done: true}}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeLeaseExpired, res.Outcomes[0].Outcome)
		require.Len(t, res.Claimed, 1)
		require.Equal(t, store.JobClaimed, b.job(t, old.ID).Status, "a zombie's result changes nothing")
	})

	t.Run("FreedGPUMemoryGoesToTheNextJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.gpuType(20000, 3)
		node := uid("node")
		b.report(t, node, 24576) // room for one 20 GB job at a time
		j1, j2 := b.submit(t, "gpu"), b.submit(t, "gpu")
		first := b.claimOn(t, "w1", node, j1.ID, j2.ID)
		require.Len(t, first.Claimed, 1)
		require.Equal(t, engine.RefusedRetryLater, first.Refused[0].Reason)
		tok := first.Leases[j1.ID].Token

		res, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", NodeID: node,
			Items:   []engine.ClaimItem{{JobID: j2.ID, Stream: "gpu"}},
			Results: []engine.Result{{JobID: j1.ID, Attempt: 1, LeaseToken: tok, Done: true}}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeDone, res.Outcomes[0].Outcome)
		require.Len(t, res.Claimed, 1, "the memory j1 released is placed again in the same transaction")
		require.Equal(t, 0, *res.Leases[j2.ID].GPUIndex)
	})
}
