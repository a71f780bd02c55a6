package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNodeLabels: node_labels from the file, ORCH_NODE_LABELS replacing them, and the errors
// naming the key.
func TestNodeLabels(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "node_labels: {zone: a, tier: prod}\n", nil)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "a", "tier": "prod"}, cfg.NodeLabels)

	cfg, err = load(t, "node_labels: {zone: a, tier: prod}\n", map[string]string{"ORCH_NODE_LABELS": "zone=b"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "b"}, cfg.NodeLabels, "the environment replaces the file's set")

	_, err = load(t, "", map[string]string{"ORCH_NODE_LABELS": "zone"})
	require.ErrorContains(t, err, "ORCH_NODE_LABELS")
	_, err = load(t, "node_labels: {gpu.product: fake}\n", nil)
	require.ErrorContains(t, err, "node_labels.gpu.product")
	_, err = load(t, "node_labels: {zone: \"a b\"}\n", nil)
	require.ErrorContains(t, err, "node_labels.zone")
}
