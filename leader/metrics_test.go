package leader_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/metrics/metricstest"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		src        leader.Leadership
		lead, term float64
	}{
		{"Leader", fakeLeader{leading: true, term: 7}, 1, 7},
		{"Follower", fakeLeader{term: 7}, 0, 0},
		{"NoElector", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fams := metricstest.Gather(t, metricstest.Registry(t, leader.NewCollector(tc.src)))
			require.Equal(t, tc.lead, metricstest.Value(t, fams, "gpu_orchestrator_is_leader", nil))
			require.Equal(t, tc.term, metricstest.Value(t, fams, "gpu_orchestrator_leader_term", nil))
		})
	}
}

type fakeLeader struct {
	leading bool
	term    int64
}

func (f fakeLeader) IsLeader() bool { return f.leading }
func (f fakeLeader) Term() int64    { return f.term }
