package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEnvMillisecondsRange: an ORCH_*_MS value is range-checked before it becomes a
// time.Duration; one past what a Duration holds would wrap around (18446744073710 ms to about
// 0.29 s).
func TestEnvMillisecondsRange(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"ORCH_LEASE_TTL_MS", "ORCH_CLAIM_IDLE_MS"} {
		for _, v := range []string{"9223372036855", "18446744073710", "99999999999999999999"} {
			_, err := load(t, "", map[string]string{key: v})
			require.ErrorContains(t, err, key+`="`+v+`": want a positive integer of at most 9223372036854`)
		}
	}
	cfg, err := load(t, "", map[string]string{"ORCH_LEASE_TTL_MS": "45000"})
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, cfg.Leases.TTL)
}
