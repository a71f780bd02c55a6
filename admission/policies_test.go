package admission

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/store"
)

func ptr[T any](v T) *T { return &v }

func TestSetPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, "admission: {default_policy: {rate_per_sec: 50, max_pending: 7}}\n")
	ctx := t.Context()

	t.Run("NewAgentInheritsTheDefault", func(t *testing.T) {
		t.Parallel()
		p, err := b.c.SetPolicy(ctx, PolicyUpdate{Agent: "inherit", MaxPending: ptr(3), Actor: "admin:x"})
		require.NoError(t, err)
		require.Equal(t, 50.0, p.RatePerSec)
		require.Equal(t, 100, p.Burst, "the default's burst: 2 s of 50/s")
		require.Equal(t, 3, p.MaxPending)
		require.True(t, p.Enabled)
		got, own := b.c.policies.lookup("inherit")
		require.True(t, own)
		require.Equal(t, p, got, "this instance applies it at once")
	})

	t.Run("PartialUpdates", func(t *testing.T) {
		t.Parallel()
		_, err := b.c.SetPolicy(ctx, PolicyUpdate{Agent: "partial", RatePerSec: ptr(10.0), Burst: ptr(4), MaxPending: ptr(9)})
		require.NoError(t, err)
		p, err := b.c.SetPolicy(ctx, PolicyUpdate{Agent: "partial", RatePerSec: ptr(2.5)})
		require.NoError(t, err)
		require.Equal(t, store.AdmissionPolicy{Agent: "partial", RatePerSec: 2.5, Burst: 5, MaxPending: 9, Enabled: true,
			UpdatedAt: p.UpdatedAt}, p, "a new rate without a burst gets a burst of 2 s")
		p, err = b.c.SetPolicy(ctx, PolicyUpdate{Agent: "partial", Enabled: ptr(false)})
		require.NoError(t, err)
		require.Equal(t, 2.5, p.RatePerSec)
		require.Equal(t, 5, p.Burst)
		require.False(t, p.Enabled)
		p, err = b.c.SetPolicy(ctx, PolicyUpdate{Agent: "partial", RatePerSec: ptr(2.5), Burst: ptr(1)})
		require.NoError(t, err)
		require.Equal(t, 1, p.Burst, "an explicit burst wins")
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			u     PolicyUpdate
			field string
		}{
			{PolicyUpdate{Agent: ""}, "agent"},
			{PolicyUpdate{Agent: "bad", RatePerSec: ptr(0.0)}, "rate_per_sec"},
			{PolicyUpdate{Agent: "bad", RatePerSec: ptr(2e6)}, "rate_per_sec"},
			{PolicyUpdate{Agent: "bad", Burst: ptr(0)}, "burst"},
			{PolicyUpdate{Agent: "bad", MaxGPUs: ptr(-1)}, "max_gpus"},
			{PolicyUpdate{Agent: "bad", MaxGPUMemoryMB: ptr(int64(config.AdmissionMaxGPUMemoryMBMax + 1))}, "max_gpu_memory_mb"},
			{PolicyUpdate{Agent: "bad", MaxPending: ptr(-1)}, "max_pending"},
		} {
			_, err := b.c.SetPolicy(ctx, tc.u)
			var pe *PolicyError
			require.ErrorAs(t, err, &pe, "%+v", tc.u)
			require.Equal(t, tc.field, pe.Field)
		}
		_, err := b.st.AdmissionPolicyGet(ctx, "bad")
		require.ErrorIs(t, err, store.ErrNotFound, "nothing written")
	})

	t.Run("Audited", func(t *testing.T) {
		t.Parallel()
		_, err := b.c.SetPolicy(ctx, PolicyUpdate{Agent: "audited", RatePerSec: ptr(1.0), Actor: "admin:first"})
		require.NoError(t, err)
		_, err = b.c.SetPolicy(ctx, PolicyUpdate{Agent: "audited", Burst: ptr(9), Actor: "admin:second"})
		require.NoError(t, err)
		require.NoError(t, b.c.DeletePolicy(ctx, "audited", "admin:third"))
		events, err := b.st.AuditList(ctx, store.AuditListParams{Limit: 1000})
		require.NoError(t, err)
		var mine []store.AuditEvent
		for _, ev := range events {
			var d struct {
				Policy, Previous struct{ Agent string }
			}
			require.NoError(t, json.Unmarshal(ev.Details, &d))
			if d.Policy.Agent == "audited" || d.Previous.Agent == "audited" {
				mine = append(mine, ev)
			}
		}
		require.Len(t, mine, 3)
		require.Equal(t, []string{EventPolicySet, EventPolicySet, EventPolicyDeleted},
			[]string{mine[0].EventType, mine[1].EventType, mine[2].EventType})
		require.Equal(t, "admin:second", mine[1].Actor)
		require.Contains(t, string(mine[1].Details), `"previous"`)
		require.Contains(t, string(mine[1].Details), `"burst":9`)
	})
}

func TestDefaultPolicyRow(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	def, fromTable := b.c.policies.defaultPolicy()
	require.False(t, fromTable)
	require.Equal(t, config.AdmissionRatePerSecDefault, def.RatePerSec)

	// The "*" row replaces the configured default for every agent without a row of its own.
	b.setPolicy(t, store.AdmissionDefaultAgent, 0.001, 1, 0)
	requireAdmitted(t, b.job(t, "nobody", "noop"), ReasonOK)
	requireRejected(t, b.job(t, "nobody", "noop"), ReasonRateLimited)
	st := b.c.Status()
	require.True(t, st.DefaultFromTable)
	require.Equal(t, 1, st.DefaultPolicy.Burst)

	require.NoError(t, b.c.DeletePolicy(t.Context(), store.AdmissionDefaultAgent, "admin:x"))
	_, fromTable = b.c.policies.defaultPolicy()
	require.False(t, fromTable, "back to the configuration's default")
	require.ErrorIs(t, b.c.DeletePolicy(t.Context(), store.AdmissionDefaultAgent, "admin:x"), store.ErrNotFound)
}

func TestPolicyRefresh(t *testing.T) {
	t.Parallel()
	a := setup(t, "")
	other := newBundle(t, a.st, a.rdb, a.prefix, a.cfg)

	t.Run("OtherInstanceSeesChanges", func(t *testing.T) {
		a.setPolicy(t, "seen", 3, 3, 3)
		_, own := other.c.policies.lookup("seen")
		require.False(t, own, "not before the other instance refreshes")
		res := other.refresh(t)
		require.Equal(t, 1, res.Policies)
		p, own := other.c.policies.lookup("seen")
		require.True(t, own)
		require.Equal(t, 3.0, p.RatePerSec)

		require.NoError(t, a.c.DeletePolicy(t.Context(), "seen", "admin:x"))
		other.refresh(t)
		_, own = other.c.policies.lookup("seen")
		require.False(t, own)
	})

	t.Run("StaleReadDoesNotUndoALocalChange", func(t *testing.T) {
		// A refresh whose read began before a change made through this instance must not put
		// the old rows back.
		gen := a.c.policies.generation()
		rows, err := a.st.AdmissionPolicyList(t.Context())
		require.NoError(t, err)
		a.setPolicy(t, "raced", 1, 1, 0)
		_, applied := a.c.policies.replace(rows, gen, a.clock.Now())
		require.False(t, applied)
		_, own := a.c.policies.lookup("raced")
		require.True(t, own)
		require.Equal(t, 1, a.refresh(t).Policies, "the next refresh applies")
	})
}

// TestQuota: an agent's GPU quota is its own policy's, else the default's, which caps each
// agent without a row on its own; a disabled policy exempts its agent; a new row starts from
// the default's quota; the configuration's default carries one too.
func TestQuota(t *testing.T) {
	t.Parallel()
	b := setup(t, "admission: {default_policy: {max_gpus: 4, max_gpu_memory_mb: 320000}}\n")
	ctx := t.Context()

	mem, gpus := b.c.Quota("anyone")
	require.Equal(t, int64(320000), mem, "the configured default's")
	require.Equal(t, 4, gpus)

	p, err := b.c.SetPolicy(ctx, PolicyUpdate{Agent: "own", MaxGPUs: ptr(1), Actor: "admin:x"})
	require.NoError(t, err)
	require.Equal(t, int64(320000), p.MaxGPUMemoryMB, "a new row starts from the default's quota")
	mem, gpus = b.c.Quota("own")
	require.Equal(t, int64(320000), mem)
	require.Equal(t, 1, gpus)

	_, err = b.c.SetPolicy(ctx, PolicyUpdate{Agent: store.AdmissionDefaultAgent, MaxGPUs: ptr(2), MaxGPUMemoryMB: ptr(int64(0))})
	require.NoError(t, err)
	for _, agent := range []string{"x", "y"} {
		mem, gpus = b.c.Quota(agent)
		require.Zero(t, mem, "0: no cap")
		require.Equal(t, 2, gpus, "each agent without a row gets the default's quota")
	}
	_, gpus = b.c.Quota("own")
	require.Equal(t, 1, gpus, "an agent's own row wins")

	_, err = b.c.SetPolicy(ctx, PolicyUpdate{Agent: "own", Enabled: ptr(false)})
	require.NoError(t, err)
	mem, gpus = b.c.Quota("own")
	require.Zero(t, mem)
	require.Zero(t, gpus, "a disabled policy exempts its agent")

	off := setup(t, "admission: {disabled: true, default_policy: {max_gpus: 1}}\n")
	_, gpus = off.c.Quota("anyone")
	require.Zero(t, gpus, "admission control disabled: no quota")
}
