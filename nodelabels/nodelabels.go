// Package nodelabels holds the rules of node labels: what a label an operator configures
// (node_labels, ORCH_NODE_LABELS) may be, which labels the orchestrator derives itself from a
// node's telemetry (gpu.*), and how the two sources merge into the one labels map of a nodes
// row.
//
// It is a leaf (it imports only internal/ident) so that the configuration, the store, the
// lease manager and the API share one set of rules; the lease manager derives the automatic
// labels from telemetry (leases.NodeLabels).
package nodelabels

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/internal/ident"
)

// Limits of configured labels. Keys are short enough for a table column; values hold a GPU
// product name; 32 labels are far more than any placement rule needs, and bound what every
// registration writes.
const (
	MaxLabels = 32
	// AutoPrefix starts every key the orchestrator sets from telemetry; a configured key may
	// not, so that an operator cannot claim a GPU the node does not have.
	AutoPrefix = "gpu."
)

// Key and Value are the identifiers a label's key and value must be.
var (
	Key   = ident.Pattern{Min: 1, Max: 63}
	Value = ident.Pattern{Min: 1, Max: 128}
)

// Error is a label that breaks the rules: Field names it as the caller knows it
// ("node_labels.zone", "node_labels").
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

// Validate checks configured labels; field names the map in errors ("node_labels"), a key's
// error names field.key. The first broken rule in key order is reported, so the message is
// the same on every run.
func Validate(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return &Error{Field: field, Message: fmt.Sprintf("at most %d labels, not %d", MaxLabels, len(labels))}
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		switch {
		case !Key.MatchString(k):
			return &Error{Field: field, Message: fmt.Sprintf("key %q must be %s", k, Key.Rule())}
		case strings.HasPrefix(k, AutoPrefix):
			return &Error{Field: field + "." + k, Message: fmt.Sprintf("keys starting with %q are set by the orchestrator from telemetry", AutoPrefix)}
		case !Value.MatchString(labels[k]):
			return &Error{Field: field + "." + k, Message: fmt.Sprintf("value %q must be %s", labels[k], Value.Rule())}
		}
	}
	return nil
}

// Parse reads labels in the form of ORCH_NODE_LABELS: "zone=a,tier=prod". Blank entries are
// skipped; an entry without "=" or a key given twice is an error. The labels are not
// validated (Validate does that, for both sources of the configuration).
func Parse(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return nil, fmt.Errorf("label %q: want key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// IsAuto reports whether labels are a set the orchestrator derived from telemetry (they hold a
// gpu.* key; an automatic set always holds gpu.count) rather than a configured set.
func IsAuto(labels map[string]string) bool {
	for k := range labels {
		if strings.HasPrefix(k, AutoPrefix) {
			return true
		}
	}
	return false
}

// Merge returns stored with the labels of update's source replaced by update: an automatic
// set (IsAuto) replaces every gpu.* key of stored, a configured set every other key. Each
// source thus writes its full set without erasing the other's, and a label a source no longer
// sends goes away. A nil update changes nothing.
func Merge(stored, update map[string]string) map[string]string {
	if update == nil {
		return maps.Clone(stored)
	}
	auto := IsAuto(update)
	out := make(map[string]string, len(stored)+len(update))
	for k, v := range stored {
		if strings.HasPrefix(k, AutoPrefix) != auto {
			out[k] = v
		}
	}
	for k, v := range update {
		if strings.HasPrefix(k, AutoPrefix) == auto {
			out[k] = v
		}
	}
	return out
}

// String is labels as "k=v,k=v", keys sorted: the form of ORCH_NODE_LABELS, for tables and
// logs.
func String(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}
