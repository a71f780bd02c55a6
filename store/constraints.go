package store

import "slices"

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
