package leases_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/nodelabels"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
)

// TestRecordSnapshotLabelsNode: telemetry records the node's gpu.* labels beside its configured
// ones, writes the row again only when they change or NodeSeenInterval passed, and a CPU-only
// snapshot writes nothing.
func TestRecordSnapshotLabelsNode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	node := func() store.Node {
		n, err := b.st.NodeGet(ctx, "labelled")
		require.NoError(t, err)
		return n
	}
	require.NoError(t, b.m.RecordSnapshot(ctx, telemetry.Snapshot{NodeID: "labelled", Source: telemetry.SourceNone}))
	_, err := b.st.NodeGet(ctx, "labelled")
	require.ErrorIs(t, err, store.ErrNotFound, "a CPU-only reporter says nothing of the node's GPUs")

	require.NoError(t, b.st.NodeUpsert(ctx, "labelled", map[string]string{"zone": "a"}, b.clock.Now()))
	b.simulate(t, "labelled", "24576,81920")
	first := node()
	require.Equal(t, map[string]string{
		"zone": "a", nodelabels.KeyCount: "2", nodelabels.KeyMemoryMB: "81920", nodelabels.KeyProduct: "Simulated-GPU",
		nodelabels.KeyDriver: telemetry.SimDriverVersion, nodelabels.KeyMIG: telemetry.MIGDisabled,
	}, first.Labels)

	// The same labels a moment later: no write.
	b.clock.Add(time.Second)
	b.simulate(t, "labelled", "24576,81920")
	require.True(t, first.LastSeen.Equal(node().LastSeen), "unchanged labels are not written again at once")

	// Changed labels: written at once.
	b.simulate(t, "labelled", "24576")
	n := node()
	require.Equal(t, "1", n.Labels[nodelabels.KeyCount])
	require.Equal(t, "a", n.Labels["zone"])
	require.True(t, b.clock.Now().Equal(n.LastSeen))

	// Unchanged, but NodeSeenInterval later: last_seen moves.
	b.clock.Add(leases.NodeSeenInterval)
	b.simulate(t, "labelled", "24576")
	require.True(t, b.clock.Now().Equal(node().LastSeen))
}

func TestNodeLabels(t *testing.T) {
	t.Parallel()
	require.Nil(t, leases.NodeLabels(telemetry.Snapshot{Source: telemetry.SourceNone}))
	snap := telemetry.Snapshot{DriverVersion: "550.54.15", CUDAVersion: "12.4", GPUs: []telemetry.GPU{
		{Index: 0, Name: "NVIDIA L4", MemoryTotalMB: 23034, MIG: telemetry.MIGDisabled},
		{Index: 1, Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920, MIG: telemetry.MIGEnabled},
	}}
	require.Equal(t, map[string]string{
		nodelabels.KeyCount: "2", nodelabels.KeyMemoryMB: "81920", nodelabels.KeyProduct: "NVIDIA-A100-SXM4-80GB",
		nodelabels.KeyDriver: "550.54.15", nodelabels.KeyCUDA: "12.4", nodelabels.KeyMIG: telemetry.MIGEnabled,
	}, leases.NodeLabels(snap))
	// What the telemetry does not say is left out.
	require.Equal(t, map[string]string{nodelabels.KeyCount: "1", nodelabels.KeyMemoryMB: "1000"},
		leases.NodeLabels(telemetry.Snapshot{GPUs: []telemetry.GPU{{MemoryTotalMB: 1000}}}))
}
