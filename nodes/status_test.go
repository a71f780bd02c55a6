package nodes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// TestStatus: cordoned wins; a node is offline only without a live worker and with telemetry
// older than the freshness window (a lost GPU's fresh row counts as telemetry).
func TestStatus(t *testing.T) {
	t.Parallel()
	const fresh = 30 * time.Second
	gpu := func(age time.Duration, lost bool) leases.GPUStatus {
		return leases.GPUStatus{GPUCapacity: store.GPUCapacity{GPUDevice: store.GPUDevice{Lost: lost}}, Age: age}
	}
	live := store.Worker{Status: store.WorkerIdle}
	gone := store.Worker{Status: store.WorkerOffline}
	for _, tc := range []struct {
		name string
		v    View
		want string
	}{
		{"Nothing", View{}, StatusOffline},
		{"LiveWorker", View{Workers: []store.Worker{gone, live}}, StatusReady},
		{"OfflineWorkerStaleGPU", View{Workers: []store.Worker{gone}, GPUs: []leases.GPUStatus{gpu(time.Minute, false)}}, StatusOffline},
		{"FreshGPU", View{GPUs: []leases.GPUStatus{gpu(time.Second, false)}}, StatusReady},
		{"FreshLostGPU", View{GPUs: []leases.GPUStatus{gpu(time.Second, true)}}, StatusReady},
		{"Cordoned", View{Node: store.Node{Cordoned: true}, Workers: []store.Worker{live}}, StatusCordoned},
	} {
		require.Equal(t, tc.want, status(tc.v, fresh), tc.name)
	}
}
