package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

func TestTokenBucket(t *testing.T) {
	t.Parallel()
	b := setup(t, "")

	t.Run("BurstThenRetryAfter", func(t *testing.T) {
		t.Parallel()
		b.setPolicy(t, "burst-agent", 1, 3, 0)
		for range 3 {
			requireAdmitted(t, b.job(t, "burst-agent", "noop"), ReasonOK)
		}
		d := b.job(t, "burst-agent", "noop")
		requireRejected(t, d, ReasonRateLimited)
		require.LessOrEqual(t, d.RetryAfter, time.Second, "one token per second")
		requireRejected(t, b.lease(t, "burst-agent", false), ReasonRateLimited)

		// The bucket is the agent's: another agent (on the default policy) is unaffected.
		requireAdmitted(t, b.job(t, "calm-agent", "noop"), ReasonOK)
		require.Equal(t, 3.0, b.decisions("burst-agent", DecisionAdmitted, ReasonOK))
		require.Equal(t, 2.0, b.decisions("burst-agent", DecisionRejected, ReasonRateLimited))
		require.Equal(t, 1.0, b.decisions(store.AdmissionDefaultAgent, DecisionAdmitted, ReasonOK),
			"agents without a policy count under *")
	})

	t.Run("SharedByInstances", func(t *testing.T) {
		t.Parallel()
		// A second controller on the same database and Redis prefix takes from the same bucket.
		other := newBundle(t, b.st, b.rdb, b.prefix, b.cfg)
		b.setPolicy(t, "shared-agent", 0.5, 2, 0)
		other.refresh(t)
		requireAdmitted(t, b.job(t, "shared-agent", "noop"), ReasonOK)
		requireAdmitted(t, other.job(t, "shared-agent", "noop"), ReasonOK)
		requireRejected(t, b.job(t, "shared-agent", "noop"), ReasonRateLimited)
		d := other.job(t, "shared-agent", "noop")
		requireRejected(t, d, ReasonRateLimited)
		require.Greater(t, d.RetryAfter, time.Second, "0.5 per second: a token every 2 s")
	})

	t.Run("DisabledPolicyExempts", func(t *testing.T) {
		t.Parallel()
		off := false
		b.setPolicy(t, "exempt-agent", 0.001, 1, 1)
		_, err := b.c.SetPolicy(t.Context(), PolicyUpdate{Agent: "exempt-agent", Enabled: &off})
		require.NoError(t, err)
		b.insertJob(t, "exempt-1", "exempt-agent", "noop")
		for range 3 {
			requireAdmitted(t, b.job(t, "exempt-agent", "noop"), ReasonExempt)
		}
	})

	t.Run("KeysUnderThePrefix", func(t *testing.T) {
		t.Parallel()
		p := b.setPolicy(t, "keyed-agent", 1, 5, 0)
		requireAdmitted(t, b.job(t, "keyed-agent", "noop"), ReasonOK)
		key := BucketKey(b.prefix, "keyed-agent", p)
		require.Equal(t, b.prefix+"admission:bucket:keyed-agent:1/5", key)
		n, err := b.rdb.Exists(t.Context(), key).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the bucket lives under the cluster's prefix, without redis_rate's own")
		n, err = b.rdb.Exists(t.Context(), redisRateKeyPrefix+key).Result()
		require.NoError(t, err)
		require.Zero(t, n)
		require.NoError(t, b.c.limiter.Reset(t.Context(), "keyed-agent", p))
		n, err = b.rdb.Exists(t.Context(), key).Result()
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("PolicyChangeStartsAFreshBucket", func(t *testing.T) {
		t.Parallel()
		// An agent deep in debt at a tiny rate is admitted at once when its rate is raised.
		b.setPolicy(t, "raised", 0.01, 1, 0)
		requireAdmitted(t, b.job(t, "raised", "noop"), ReasonOK)
		d := b.job(t, "raised", "noop")
		requireRejected(t, d, ReasonRateLimited)
		require.Greater(t, d.RetryAfter, 90*time.Second)
		b.setPolicy(t, "raised", 1000, 10, 0)
		requireAdmitted(t, b.job(t, "raised", "noop"), ReasonOK)
	})
}

func TestMaxPending(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.setPolicy(t, "capped", 1000, 1000, 2)
	b.insertJob(t, "capped-1", "capped", "noop")
	d := b.job(t, "capped", "noop")
	requireAdmitted(t, d, ReasonOK)
	j := b.insertJob(t, "capped-2", "capped", "gpu") // the job d admitted, written
	b.c.Finished(d, true)
	d = b.job(t, "capped", "noop")
	requireRejected(t, d, ReasonMaxPending)
	require.Contains(t, d.Message, "max_pending")
	requireAdmitted(t, b.lease(t, "capped", false), ReasonOK) // leases are not jobs

	// A finished job no longer counts.
	require.NoError(t, b.st.JobUpdate(t.Context(), store.JobUpdate{ID: j.ID, From: store.JobPending,
		To: store.JobCancelled, Now: b.clock.Now()}))
	d = b.job(t, "capped", "noop")
	requireAdmitted(t, d, ReasonOK)
	b.c.Finished(d, false)
}

// TestMaxPendingCountsUnwritten: submits admitted under a max_pending and not written yet
// (a batch's jobs, concurrent submits) hold their places until Finished, which the count
// query cannot see; a submit the bucket then refuses holds none.
func TestMaxPendingCountsUnwritten(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.setPolicy(t, "burst", 1000, 1000, 3)
	b.insertJob(t, "burst-0", "burst", "noop")
	var held []Decision
	for range 2 {
		d := b.job(t, "burst", "noop")
		requireAdmitted(t, d, ReasonOK)
		held = append(held, d)
	}
	requireRejected(t, b.job(t, "burst", "noop"), ReasonMaxPending)

	// A submit that failed gives its place back; one written keeps it through the count.
	b.c.Finished(held[0], false)
	d := b.job(t, "burst", "noop")
	requireAdmitted(t, d, ReasonOK)
	b.c.Finished(d, false)

	// A refusal by the token bucket holds nothing: once the bucket refills, the place is there.
	b.setPolicy(t, "slow", 0.001, 1, 2)
	requireAdmitted(t, b.job(t, "slow", "noop"), ReasonOK) // never finished: holds a place
	requireRejected(t, b.job(t, "slow", "noop"), ReasonRateLimited)
	requireRejected(t, b.job(t, "slow", "noop"), ReasonRateLimited)
	b.setPolicy(t, "slow", 1000, 1000, 2)
	requireAdmitted(t, b.job(t, "slow", "noop"), ReasonOK)
	requireRejected(t, b.job(t, "slow", "noop"), ReasonMaxPending)
}

func TestDuplicateSubmitIsAdmitted(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.setPolicy(t, "dup", 0.001, 1, 0)
	requireAdmitted(t, b.job(t, "dup", "noop"), ReasonOK)
	b.insertJob(t, "dup-job", "dup", "gpu")

	// Refused by the bucket, but the job exists: the submit goes on and answers with it.
	d, err := b.c.AdmitJob(t.Context(), JobRequest{Agent: "dup", Type: "noop", JobID: "dup-job"})
	require.NoError(t, err)
	requireAdmitted(t, d, ReasonDuplicate)
	require.Equal(t, "gpu", d.Type, "the existing job's type")

	// Another agent's job of that id, or an unknown id: still refused.
	b.setPolicy(t, "thief", 0.001, 1, 0)
	requireAdmitted(t, b.job(t, "thief", "noop"), ReasonOK)
	d, err = b.c.AdmitJob(t.Context(), JobRequest{Agent: "thief", Type: "noop", JobID: "dup-job"})
	require.NoError(t, err)
	requireRejected(t, d, ReasonRateLimited)
	d, err = b.c.AdmitJob(t.Context(), JobRequest{Agent: "dup", Type: "noop", JobID: "no-such-job"})
	require.NoError(t, err)
	requireRejected(t, d, ReasonRateLimited)
}

func TestDisabled(t *testing.T) {
	t.Parallel()
	b := setup(t, "admission: {disabled: true, default_policy: {rate_per_sec: 0.001, burst: 1}}\n")
	for range 3 {
		requireAdmitted(t, b.job(t, "any", "gpu"), ReasonDisabled)
		requireAdmitted(t, b.lease(t, "any", true), ReasonDisabled)
	}
	require.NoError(t, b.c.Ready())
	require.False(t, b.c.Status().Enabled)
}

func TestCancelledContextIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	_, err := b.c.AdmitJob(ctxDone(), JobRequest{Agent: "a", Type: "noop"})
	require.Error(t, err)
	require.True(t, b.c.limiter.State().Up, "a client that went away says nothing about Redis")
	_, err = b.c.AdmitLease(ctxDone(), LeaseRequest{Agent: "a"})
	require.Error(t, err)
}

func TestMetricsPrecreated(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	for _, r := range admittedReasons {
		require.Zero(t, b.decisions(store.AdmissionDefaultAgent, DecisionAdmitted, r))
	}
	n, err := testutilCount(b)
	require.NoError(t, err)
	require.Equal(t, len(admittedReasons)+len(rejectedReasons), n, "every (decision, reason) of * exists at 0")

	// A policy written elsewhere gets its series at the next refresh.
	_, err = b.st.AdmissionPolicyUpsert(t.Context(), store.AdmissionPolicy{Agent: "elsewhere", RatePerSec: 1, Burst: 1, Enabled: true, UpdatedAt: b.clock.Now()})
	require.NoError(t, err)
	b.refresh(t)
	n, err = testutilCount(b)
	require.NoError(t, err)
	require.Equal(t, 2*(len(admittedReasons)+len(rejectedReasons)), n)
}

// testutilCount counts the series of the decision counter.
func testutilCount(b *bundle) (int, error) {
	families, err := b.reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() == "gpu_orchestrator_admission_decisions_total" {
			return len(f.GetMetric()), nil
		}
	}
	return 0, nil
}
