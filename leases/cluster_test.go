package leases

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// cluster builds a Cluster of nodes (id → GPUs) at now, as LockCluster would.
func cluster(now time.Time, cfg Config, nodes map[string][]store.GPUCapacity) *Cluster {
	c := &Cluster{nodes: map[string]*NodeLock{}, margin: cfg.SafetyMarginMB}
	for id, gs := range nodes {
		for i := range gs {
			gs[i].NodeID = id
		}
		c.nodes[id] = newNodeLock(id, gs, now, cfg)
		c.order = append(c.order, id)
	}
	slices.Sort(c.order)
	return c
}

func TestClusterChoose(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{SafetyMarginMB: 512, TelemetryFreshness: 30 * time.Second}
	build := func() *Cluster {
		return cluster(now, cfg, map[string][]store.GPUCapacity{
			"a": {gpu(0, 81920, 0, 0, now), gpu(1, 81920, 0, 0, now)},         // two idle
			"b": {gpu(0, 81920, 0, 50000, now), gpu(1, 81920, 0, 0, now)},     // 30908 MB free on GPU 0
			"c": {gpu(0, 81920, 0, 0, now.Add(-time.Minute))},                 // stale
			"d": {gpu(0, 81920, 0, 70000, now), gpu(1, 81920, 0, 70000, now)}, // 10908 MB free on each
		})
	}
	all := []string{"a", "b", "c", "d"}

	t.Run("BestFitLeavesWholeGPUs", func(t *testing.T) {
		t.Parallel()
		c := build()
		node, err := c.Choose(Request{MemoryMB: 10000}, all, PolicyBestFit)
		require.NoError(t, err)
		require.Equal(t, "d", node, "the least left over: 908 MB on d")
		node, err = c.Choose(Request{MemoryMB: 30000}, all, PolicyBestFit)
		require.NoError(t, err)
		require.Equal(t, "b", node, "b's GPU 0 fits with 908 MB left; a keeps its whole GPUs")
	})
	t.Run("Spread", func(t *testing.T) {
		t.Parallel()
		node, err := build().Choose(Request{MemoryMB: 10000}, all, PolicySpread)
		require.NoError(t, err)
		require.Equal(t, "a", node, "the most left over; a before b on the tie of whole GPUs")
	})
	t.Run("SeveralGPUsOfOneNode", func(t *testing.T) {
		t.Parallel()
		c := build()
		node, err := c.Choose(Request{MemoryMB: 30000, GPUs: 2}, all, PolicyBestFit)
		require.NoError(t, err)
		require.Equal(t, "b", node, "b's two GPUs fit with less left over than a's")
		_, err = c.Choose(Request{MemoryMB: 60000, GPUs: 2}, []string{"b", "d"}, PolicyBestFit)
		d, ok := IsDenial(err)
		require.True(t, ok)
		require.Equal(t, ReasonNoCapacity, d.Reason)
		require.Contains(t, d.Message, "needs 60000 MB on 2 GPU(s) of one node; the most free is 81408 MB on b/1")
	})
	t.Run("OnlyEligibleNodes", func(t *testing.T) {
		t.Parallel()
		c := build()
		_, err := c.Choose(Request{MemoryMB: 1000}, []string{"c", "e"}, PolicyBestFit)
		d, ok := IsDenial(err)
		require.True(t, ok)
		require.Equal(t, ReasonNoFreshTelemetry, d.Reason, "c is stale and e reports no GPU")
	})
	t.Run("ExclusiveBehindSharedLeasesHasNoRoom", func(t *testing.T) {
		t.Parallel()
		shared := gpu(0, 81920, 0, 20000, now)
		shared.Leases = 2
		c := cluster(now, cfg, map[string][]store.GPUCapacity{"d": {shared}})
		_, err := c.Choose(Request{MemoryMB: 1000, Exclusive: true}, []string{"d"}, PolicyBestFit)
		d, ok := IsDenial(err)
		require.True(t, ok)
		require.Equal(t, ReasonNoCapacity, d.Reason, "d's GPU is fresh, only shared: %s", d.Message)
		require.Contains(t, d.Message, "unshared GPU")
		require.Equal(t, "d", c.Hold(Request{MemoryMB: 1000, Exclusive: true}, []string{"d"}), "held until its leases end")
	})
	t.Run("ChosenThenPrepared", func(t *testing.T) {
		t.Parallel()
		c := build()
		for range 2 {
			node, err := c.Choose(Request{MemoryMB: 40000, Exclusive: true}, all, PolicyBestFit)
			require.NoError(t, err)
			require.Equal(t, "a", node)
			_, _, err = c.Node(node).Place(Request{MemoryMB: 40000, Exclusive: true})
			require.NoError(t, err)
		}
		node, err := c.Choose(Request{MemoryMB: 40000, Exclusive: true}, all, PolicyBestFit)
		require.NoError(t, err)
		require.Equal(t, "b", node, "a's GPUs are both held whole now; b's GPU 1 has no lease")
	})
}

func TestClusterHoldAndUnsatisfiable(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{SafetyMarginMB: 512, TelemetryFreshness: 30 * time.Second}
	c := cluster(now, cfg, map[string][]store.GPUCapacity{
		"small": {gpu(0, 24576, 0, 0, now)},
		"big1":  {gpu(0, 81920, 0, 60000, now)},
		"big2":  {gpu(0, 81920, 0, 30000, now)},
	})
	all := []string{"big1", "big2", "small"}
	whole := Request{MemoryMB: 70000, Exclusive: true}
	_, err := c.Choose(whole, all, PolicyBestFit)
	require.Error(t, err, "every big GPU holds a lease")
	require.Equal(t, "big2", c.Hold(whole, all), "the big node with the most free now")
	require.Empty(t, c.Hold(whole, []string{"small"}), "small could never hold it")
	require.Empty(t, c.Unsatisfiable(whole, all))
	require.Contains(t, c.Unsatisfiable(whole, []string{"small"}), "needs 70000 MB on a GPU; the largest GPU of the cluster can grant 24064 MB")
	require.Contains(t, c.Unsatisfiable(Request{MemoryMB: 1000, GPUs: 2}, all), "needs 2 GPUs of one node")
}
