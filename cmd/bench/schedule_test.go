package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPlacementOf: placements per second count the jobs placed from the first submit to the
// last placement, a job placed twice counts once (its first placement for submit → placed,
// the one it ran under for placed → start), and the passes are the distinct placement times.
func TestPlacementOf(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	runs := []gpuRun{
		{job: "a", node: "n1", gpu: 0, created: at(0), placed: at(10), start: at(25), end: at(125)},
		{job: "b", node: "n2", gpu: 0, created: at(5), placed: at(10), start: at(30), end: at(130)},
		// c's first placement (at 10) expired unclaimed; it ran under the one at 140.
		{job: "c", node: "n1", gpu: 0, created: at(10), placed: at(140), start: at(150), end: at(250)},
	}
	placed := []placement{{"a", at(10)}, {"b", at(10)}, {"c", at(10)}, {"c", at(140)}}
	p := placementOf(runs, placed, 2, 100*time.Millisecond)
	require.Equal(t, 2, p.Nodes)
	require.Equal(t, map[string]int{"n1": 2, "n2": 1}, p.JobsPerNode)
	require.Equal(t, 4, p.Placements)
	require.Equal(t, 3, p.Jobs)
	require.Equal(t, 2, p.Passes)
	require.Equal(t, 3, p.MaxPerPass)
	require.InDelta(t, 0.14, p.BacklogSeconds, 1e-9)
	require.InDelta(t, 3/0.14, p.PerSec, 0.1) // perSec rounds to 0.1
	require.InDelta(t, 20.0, p.CeilingPerSec, 1e-9)
	require.InDelta(t, p.PerSec/20, p.Efficiency, 0.001)
	// submit → first placement: 10, 5 and 0 ms; placed → start: 15, 20 and 10 ms.
	require.InDelta(t, 10.0, p.SubmitToPlacedMS.Max, 1e-9)
	require.InDelta(t, 5.0, p.SubmitToPlacedMS.P50, 1e-9)
	require.InDelta(t, 15.0, p.PlacedToStartMS.P50, 1e-9)
	require.InDelta(t, 20.0, p.PlacedToStartMS.Max, 1e-9)
}

func TestScheduleFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-scenarios", "schedule"}, {"-embedded", "-scenarios", "release,schedule"}} {
		o, _, err := parseFlags(args)
		require.NoError(t, err, "%v", args)
		require.Contains(t, o.scenarios, "schedule")
	}
	require.Contains(t, gpuTypesConfig(), "  "+scheduleType+":\n    handler: sleep\n    gpu_memory_mb: 16000\n")
}
