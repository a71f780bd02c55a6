package nodelabels

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Validate("node_labels", nil))
	require.NoError(t, Validate("node_labels", map[string]string{"zone": "a", "tier": "prod.1"}))
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		field  string
		msg    string
	}{
		{"TooMany", many, "node_labels", "at most 32"},
		{"BadKey", map[string]string{"a b": "v"}, "node_labels", `key "a b"`},
		{"LongKey", map[string]string{strings.Repeat("k", 64): "v"}, "node_labels", "1 to 63"},
		{"AutoPrefix", map[string]string{"gpu.product": "x"}, "node_labels.gpu.product", "set by the orchestrator"},
		{"EmptyValue", map[string]string{"zone": ""}, "node_labels.zone", "1 to 128"},
		{"LongValue", map[string]string{"zone": strings.Repeat("v", 129)}, "node_labels.zone", "1 to 128"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var le *Error
			require.True(t, errors.As(Validate("node_labels", tc.labels), &le))
			require.Equal(t, tc.field, le.Field)
			require.Contains(t, le.Message, tc.msg)
		})
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	got, err := Parse(" zone=a, tier = prod ,,")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "a", "tier": "prod"}, got)
	_, err = Parse("zone")
	require.ErrorContains(t, err, "want key=value")
	_, err = Parse("zone=a,zone=b")
	require.ErrorContains(t, err, "given twice")
	require.Equal(t, "tier=prod,zone=a", String(got))
}

func TestMerge(t *testing.T) {
	t.Parallel()
	stored := map[string]string{"zone": "a", "old": "x", KeyCount: "2", KeyDriver: "550"}
	// A configured set replaces the configured keys only.
	require.Equal(t, map[string]string{"zone": "b", KeyCount: "2", KeyDriver: "550"},
		Merge(stored, map[string]string{"zone": "b"}))
	// An empty configured set clears them.
	require.Equal(t, map[string]string{KeyCount: "2", KeyDriver: "550"}, Merge(stored, map[string]string{}))
	// An automatic set replaces the gpu.* keys only: a driver no longer reported goes away.
	require.Equal(t, map[string]string{"zone": "a", "old": "x", KeyCount: "4"},
		Merge(stored, map[string]string{KeyCount: "4"}))
	require.Equal(t, stored, Merge(stored, nil))
}

func TestAsValue(t *testing.T) {
	t.Parallel()
	require.NoError(t, Validate("x", map[string]string{"p": AsValue("Tesla V100 (PCIe) 16GB!")}))
	require.Equal(t, "Tesla-V100-PCIe-16GB", AsValue("Tesla V100 (PCIe) 16GB!"))
	require.Equal(t, "550.54.15", AsValue("550.54.15"))
	require.Empty(t, AsValue("  "))
}
