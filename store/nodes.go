package store

import (
	"context"
	"time"
)

// Node is one row of nodes: a host that registered a worker or reported GPU telemetry, its
// labels and whether the scheduler may place new work on it.
type Node struct {
	ID string
	// Labels are the node's configured labels (its workers' node_labels) merged with the ones
	// derived from its telemetry (gpu.*; nodelabels holds the rules). Never nil.
	Labels map[string]string
	// Cordoned keeps the scheduler from placing new jobs on the node; what runs there, or was
	// placed there before, goes on.
	Cordoned bool
	// CordonReason and CordonedBy say why and by whom the node was last cordoned or
	// uncordoned; CordonedAt when it was cordoned (nil while it is not).
	CordonReason string
	CordonedBy   string
	CordonedAt   *time.Time
	// FirstSeen is when the node was first recorded; LastSeen its latest registration or
	// telemetry record (refreshed every few seconds at most, not on every report).
	FirstSeen time.Time
	LastSeen  time.Time
}

// NodeExecutor is the operations on nodes.
type NodeExecutor interface {
	// NodeUpsert records node id at now: a new row (first_seen = last_seen = now), or the
	// existing one with last_seen moved to now (never back) and its labels merged with labels
	// (nodelabels.Merge: labels is the full set of one source, automatic when it holds a gpu.*
	// key, configured otherwise, and replaces that source's labels only; nil changes none).
	// Concurrent upserts of one node do not lose each other's labels.
	NodeUpsert(ctx context.Context, id string, labels map[string]string, now time.Time) error
	// NodeList returns every node, by id. The table holds one row per host of the cluster:
	// the scheduler reads it whole once per pass.
	NodeList(ctx context.Context) ([]Node, error)
	// NodeGet returns one node or ErrNotFound.
	NodeGet(ctx context.Context, id string) (Node, error)
	// NodeSetCordon cordons (cordoned true, cordoned_at = now) or uncordons (cordoned_at
	// cleared) node id, recording reason and by, and returns the row as stored; ErrNotFound for
	// a node never recorded.
	NodeSetCordon(ctx context.Context, id string, cordoned bool, reason, by string, now time.Time) (Node, error)
}
