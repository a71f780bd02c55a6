package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReleaseOf: the gaps are measured per GPU, between one job's end and the next one's start
// there, and a start before the previous end on the same GPU is an overlap, not a gap.
func TestReleaseOf(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	res := releaseOf([]gpuRun{
		{gpu: 0, start: at(0), end: at(200)},
		{gpu: 1, start: at(10), end: at(210)},
		{gpu: 0, start: at(220), end: at(420)}, // 20 ms after GPU 0's first job
		{gpu: 1, start: at(215), end: at(415)}, // 5 ms after GPU 1's first job
		{gpu: 1, start: at(400), end: at(600)}, // before the previous one on GPU 1 ended
	})
	require.Equal(t, 2, res.GPUs)
	require.Equal(t, 2, res.GapMS.Count)
	require.InDelta(t, 20.0, res.GapMS.Max, 0.001)
	require.InDelta(t, 5.0, res.GapMS.P50, 0.001)
	require.Equal(t, 1, res.Overlaps)
}

// TestReleaseOfNodes: GPU 0 of two nodes are two GPUs, and each gap is split at the next job's
// placement, a placement stamped before the release counting as 0 and as placed early.
func TestReleaseOfNodes(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	res := releaseOf([]gpuRun{
		{node: "n1", gpu: 0, placed: at(0), start: at(10), end: at(110)},
		{node: "n2", gpu: 0, placed: at(0), start: at(20), end: at(120)},
		{node: "n1", gpu: 0, placed: at(112), start: at(130), end: at(230)}, // 20 ms: 2 to the placement
		{node: "n2", gpu: 0, placed: at(118), start: at(130), end: at(230)}, // 10 ms, placed 2 ms early
	})
	require.Equal(t, 2, res.GPUs)
	require.Zero(t, res.Overlaps)
	require.Equal(t, 2, res.GapMS.Count)
	require.InDelta(t, 20.0, res.GapMS.Max, 1e-9)
	require.NotNil(t, res.ToPlacedMS)
	require.InDelta(t, 2.0, res.ToPlacedMS.Max, 1e-9)
	require.InDelta(t, 0.0, res.ToPlacedMS.P50, 1e-9)
	require.InDelta(t, 18.0, res.PlacedToStartMS.Max, 1e-9)
	require.Equal(t, 1, res.PlacedEarly)
}
