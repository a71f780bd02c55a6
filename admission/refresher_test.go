package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

func TestRefresherLoop(t *testing.T) {
	t.Parallel()
	b := setup(t, "admission: {refresh_interval: 100ms}\n")
	b.c.Stop() // safe before Start
	require.NoError(t, b.c.Start(t.Context()))
	t.Cleanup(b.c.Stop)

	// A policy written by another instance (straight into the table here) reaches this one
	// within the refresh interval, without any request.
	_, err := b.st.AdmissionPolicyUpsert(t.Context(), store.AdmissionPolicy{Agent: "loop", RatePerSec: 7,
		Burst: 7, Enabled: true, UpdatedAt: b.clock.Now()})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, own := b.c.policies.lookup("loop")
		return own && p.RatePerSec == 7
	}, 2*time.Second, 10*time.Millisecond)

	b.c.Stop()
	b.c.Stop() // idempotent
}
