package store

import (
	"slices"
	"strings"
)

// Constraints narrow where a job may run (submit's "constraints"). The zero value allows every
// node. The scheduler honours them for GPU jobs (engine/schedule.go).
type Constraints struct {
	// NodeSelector: every key must be a label of the node with this value.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// AllowNodes: when not empty, only these nodes.
	AllowNodes []string `json:"allow_nodes,omitempty"`
	// DenyNodes: never these nodes.
	DenyNodes []string `json:"deny_nodes,omitempty"`
	// MaxPerNode: when not 0, at most this many jobs of the same type and agent run or are
	// placed on one node at once, this one included.
	MaxPerNode int `json:"max_per_node,omitempty"`
}

// Empty reports whether c constrains nothing.
func (c *Constraints) Empty() bool {
	return c == nil || (len(c.NodeSelector) == 0 && len(c.AllowNodes) == 0 && len(c.DenyNodes) == 0 && c.MaxPerNode == 0)
}

// Matches reports whether a node with id and labels passes c's node selector and lists (not
// MaxPerNode, which depends on what runs there), and when it does not, which rule refused it.
func (c *Constraints) Matches(id string, labels map[string]string) (ok bool, rule string) {
	if c == nil {
		return true, ""
	}
	if len(c.AllowNodes) > 0 && !slices.Contains(c.AllowNodes, id) {
		return false, "allow_nodes"
	}
	if slices.Contains(c.DenyNodes, id) {
		return false, "deny_nodes"
	}
	for k, v := range c.NodeSelector {
		if got, ok := labels[k]; !ok || got != v {
			return false, "node_selector"
		}
	}
	return true, ""
}

// poolSep separates the node from the pool in a placement target (Target): "@" is in no
// identifier.
const poolSep = "@"

// Target is where the scheduler places a job (Job.PlacedNode): its node, or "<node>@<pool>"
// for a job routed to a pool (or to a model, through a pool serving it). Its stream is
// streams.NodeStream(stream, target), read by the workers of that node, and of that pool there
// for a pool's target.
func Target(node, pool string) string {
	if pool == "" {
		return node
	}
	return node + poolSep + pool
}

// SplitTarget returns the node and the pool ("" for none) of a placement target.
func SplitTarget(target string) (node, pool string) {
	node, pool, _ = strings.Cut(target, poolSep)
	return node, pool
}
