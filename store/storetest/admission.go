package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testAdmission runs the conformance tests of admission_policies and of the job counts that
// admission control reads, each on its own agents and types (they carry the subtest's prefix).
func testAdmission(t *testing.T, parent *bundle) {
	runAll(t, parent.s, []subtest{
		{"PolicyRoundTrip", testAdmissionPolicyRoundTrip},
		{"PolicyUpsertReplaces", testAdmissionPolicyUpsertReplaces},
		{"PolicyDelete", testAdmissionPolicyDelete},
		{"PolicyRollback", testAdmissionPolicyRollback},
		{"CountUnfinished", testAdmissionCountUnfinished},
		{"CountPending", testAdmissionCountPending},
	})
}

// policy returns a policy of an agent of the subtest.
func (b *bundle) policy(name string) store.AdmissionPolicy {
	return store.AdmissionPolicy{Agent: b.prefix + name, RatePerSec: 2.5, Burst: 7, MaxPending: 100,
		MaxGPUMemoryMB: 40000, MaxGPUs: 2, Enabled: true, UpdatedAt: b.now}
}

// policiesOfSubtest lists the policies and keeps those of this subtest (the table is shared).
func (b *bundle) policiesOfSubtest(t *testing.T) []store.AdmissionPolicy {
	t.Helper()
	all, err := b.s.AdmissionPolicyList(t.Context())
	require.NoError(t, err)
	var out []store.AdmissionPolicy
	for _, p := range all {
		if strings.HasPrefix(p.Agent, b.prefix) {
			out = append(out, p)
		}
	}
	return out
}

func requireSamePolicy(t *testing.T, want, got store.AdmissionPolicy) {
	t.Helper()
	requireTime(t, want.UpdatedAt, got.UpdatedAt, "updated_at")
	want.UpdatedAt = got.UpdatedAt
	require.Equal(t, want, got)
}

func testAdmissionPolicyRoundTrip(t *testing.T, b *bundle) {
	ctx := t.Context()
	limited := b.policy("limited")
	exempt := b.policy("exempt")
	exempt.RatePerSec, exempt.Burst, exempt.MaxPending, exempt.Enabled = 0.001, 1, 0, false
	limited.MaxGPUMemoryMB, limited.MaxGPUs = 1<<40, 3 // past 32 bits: the column is a BIGINT

	for _, p := range []store.AdmissionPolicy{limited, exempt} {
		stored, err := b.s.AdmissionPolicyUpsert(ctx, p)
		require.NoError(t, err)
		requireSamePolicy(t, p, stored)
		require.Equal(t, p.UpdatedAt.Truncate(time.Microsecond).UTC(), stored.UpdatedAt.UTC(),
			"the returned row is what a read gives back")
		got, err := b.s.AdmissionPolicyGet(ctx, p.Agent)
		require.NoError(t, err)
		requireSamePolicy(t, p, got)
	}

	list := b.policiesOfSubtest(t)
	require.Len(t, list, 2)
	require.Equal(t, exempt.Agent, list[0].Agent, "ordered by agent")
	require.Equal(t, limited.Agent, list[1].Agent)

	_, err := b.s.AdmissionPolicyGet(ctx, b.prefix+"nobody")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testAdmissionPolicyUpsertReplaces(t *testing.T, b *bundle) {
	ctx := t.Context()
	p := b.policy("agent")
	_, err := b.s.AdmissionPolicyUpsert(ctx, p)
	require.NoError(t, err)

	p.RatePerSec, p.Burst, p.MaxPending, p.Enabled = 1000, 2000, 0, false
	p.MaxGPUMemoryMB, p.MaxGPUs = 0, 8
	p.UpdatedAt = b.now.Add(time.Minute)
	_, err = b.s.AdmissionPolicyUpsert(ctx, p)
	require.NoError(t, err)
	got, err := b.s.AdmissionPolicyGet(ctx, p.Agent)
	require.NoError(t, err)
	requireSamePolicy(t, p, got)
	require.Len(t, b.policiesOfSubtest(t), 1, "one row per agent")

	// Agent names are compared exactly, as job ids are.
	upper := p
	upper.Agent = b.prefix + "AGENT"
	_, err = b.s.AdmissionPolicyUpsert(ctx, upper)
	require.NoError(t, err)
	require.Len(t, b.policiesOfSubtest(t), 2)
}

func testAdmissionPolicyDelete(t *testing.T, b *bundle) {
	ctx := t.Context()
	p := b.policy("gone")
	_, err := b.s.AdmissionPolicyUpsert(ctx, p)
	require.NoError(t, err)
	require.NoError(t, b.s.AdmissionPolicyDelete(ctx, p.Agent))
	_, err = b.s.AdmissionPolicyGet(ctx, p.Agent)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, b.s.AdmissionPolicyDelete(ctx, p.Agent), store.ErrNotFound)
	require.Empty(t, b.policiesOfSubtest(t))
}

func testAdmissionPolicyRollback(t *testing.T, b *bundle) {
	ctx := t.Context()
	p := b.policy("rolled-back")
	errBoom := errors.New("boom")
	err := b.s.WithTx(ctx, func(tx store.Tx) error {
		if _, err := tx.AdmissionPolicyUpsert(ctx, p); err != nil {
			return err
		}
		got, err := tx.AdmissionPolicyGet(ctx, p.Agent)
		require.NoError(t, err, "the transaction reads its own write")
		requireSamePolicy(t, p, got)
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	_, err = b.s.AdmissionPolicyGet(ctx, p.Agent)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testAdmissionCountUnfinished(t *testing.T, b *bundle) {
	ctx := t.Context()
	agent := b.agent()
	count := func(limit int) int {
		t.Helper()
		n, err := b.s.JobCountUnfinished(ctx, agent, limit)
		require.NoError(t, err)
		return n
	}
	require.Zero(t, count(0))

	// One job in every state: the six non-terminal ones count (waiting and awaiting_approval
	// too: an agent's jobs held back are still its jobs), the three terminal ones do not.
	for _, s := range store.JobStatuses {
		j := b.insert(t, "job-"+string(s))
		if s != store.JobPending {
			require.NoError(t, b.update(t, store.JobUpdate{ID: j.ID, From: store.JobPending, To: s}))
		}
	}
	other := b.insert(t, "other-agent", func(p *store.JobInsertParams) { p.Agent = b.prefix + "other" })
	require.Equal(t, store.JobPending, other.Status)

	require.Len(t, store.UnfinishedJobStatuses(), 6)
	require.Equal(t, 6, count(0), "no bound")
	require.Equal(t, 6, count(100))
	require.Equal(t, 3, count(3), "the count stops at the limit")
	require.Equal(t, 1, count(1))
	n, err := b.s.JobCountUnfinished(ctx, b.prefix+"nobody", 10)
	require.NoError(t, err)
	require.Zero(t, n)
}

func testAdmissionCountPending(t *testing.T, b *bundle) {
	ctx := t.Context()
	gpu, cpu, idle := b.prefix+"gpu", b.prefix+"cpu", b.prefix+"idle"
	for i, typ := range []string{gpu, gpu, gpu, cpu} {
		b.insert(t, fmt.Sprintf("pending-%d", i), func(p *store.JobInsertParams) { p.Type = typ })
	}
	// A pending job waiting for its backoff is backlog too; a claimed one is not.
	b.insert(t, "later", func(p *store.JobInsertParams) { p.Type, p.AvailableAt = cpu, b.now.Add(time.Hour) })
	claimed := b.insert(t, "claimed", func(p *store.JobInsertParams) { p.Type = gpu })
	require.NoError(t, b.update(t, store.JobUpdate{ID: claimed.ID, From: store.JobPending, To: store.JobClaimed}))

	got, err := b.s.JobCountPending(ctx, []string{gpu, cpu, idle}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]int{gpu: 3, cpu: 2}, got)

	got, err = b.s.JobCountPending(ctx, []string{cpu}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]int{cpu: 2}, got, "only the types asked for")

	// Excluded ids are left out; unknown and non-ASCII ones change nothing.
	got, err = b.s.JobCountPending(ctx, []string{gpu, cpu},
		[]string{b.id("pending-0"), b.id("later"), b.id("pending-3"), "no-such-job", "jöb"})
	require.NoError(t, err)
	require.Equal(t, map[string]int{gpu: 2}, got, "cpu had two pending jobs, both excluded")

	got, err = b.s.JobCountPending(ctx, nil, []string{"x"})
	require.NoError(t, err)
	require.Empty(t, got)
}
