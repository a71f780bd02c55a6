package sqlgen

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/nodelabels"
	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of the node registry that both dialects share
// (store.NodeExecutor).

const nodeColumns = "node_id, labels, cordoned, cordon_reason, cordoned_by, cordoned_at, first_seen, last_seen"

// Column caps of nodes: a longer reason or actor is stored cut rather than failing the cordon
// (the API refuses a reason over the cap before it gets here).
const (
	nodeReasonMax = 512
	nodeActorMax  = 128
)

// nodeUpsertTries bounds NodeUpsert's compare-and-set loop. Two writers of one node (its
// worker's registration, its telemetry) rarely meet; a few tries always suffice.
const nodeUpsertTries = 8

// NodeUpsert merges labels into the node's stored labels with a compare-and-set on the stored
// JSON, which needs neither a transaction nor a lock (it runs on the telemetry path, outside
// any): a writer that lost the race reads again and merges again, so neither source's labels
// are lost. The JSON is canonical (encoding/json sorts a map's keys), so equal label sets
// compare equal.
func (e Executor) NodeUpsert(ctx context.Context, id string, labels map[string]string, now time.Time) error {
	what := "record node " + id
	at := e.d.Time(now)
	for range nodeUpsertTries {
		var stored string
		err := e.w.QueryRowContext(ctx, "SELECT labels FROM nodes WHERE node_id = ?", id).Scan(&stored)
		if errors.Is(err, sql.ErrNoRows) {
			_, err = e.w.ExecContext(ctx, "INSERT INTO nodes (node_id, labels, first_seen, last_seen) VALUES (?, ?, ?, ?)",
				id, labelsJSON(nodelabels.Merge(nil, labels)), at, at)
			if err = e.d.MapErr(err); err == nil {
				return nil
			}
			if errors.Is(err, store.ErrConflict) {
				continue // inserted meanwhile: merge into that row
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, e.d.MapErr(err))
		}
		cur, err := parseLabels(stored)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		n, err := e.d.ExecCount(ctx, e.w, what, "UPDATE nodes SET labels = ?, last_seen = "+e.d.Greatest+
			"(last_seen, ?) WHERE node_id = ? AND labels = ?", labelsJSON(nodelabels.Merge(cur, labels)), at, id, stored)
		if err != nil || n == 1 {
			return err
		}
	}
	return fmt.Errorf("%s: labels changed under %d tries: %w", what, nodeUpsertTries, store.ErrConflict)
}

// NodeList returns every node, by id.
func (e Executor) NodeList(ctx context.Context) ([]store.Node, error) {
	nodes, err := query(ctx, e.d, e.r, e.d.scanNode, "SELECT "+nodeColumns+" FROM nodes ORDER BY node_id")
	return nodes, wrapErr("list nodes", err)
}

// wrapErr says what failed; nil stays nil.
func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// NodeGet returns one node or store.ErrNotFound.
func (e Executor) NodeGet(ctx context.Context, id string) (store.Node, error) {
	n, err := e.d.scanNode(e.r.QueryRowContext(ctx, "SELECT "+nodeColumns+" FROM nodes WHERE node_id = ?", id))
	if err != nil {
		return store.Node{}, fmt.Errorf("get node %s: %w", id, e.d.MapErr(err))
	}
	return n, nil
}

// NodeSetCordon writes the node's cordon and reads the row back through the connection that
// wrote it.
func (e Executor) NodeSetCordon(ctx context.Context, id string, cordoned bool, reason, by string, now time.Time) (store.Node, error) {
	what := "cordon node " + id
	if !cordoned {
		what = "uncordon node " + id
	}
	var at any
	if cordoned {
		at = e.d.Time(now)
	}
	if err := e.execFound(ctx, what, "UPDATE nodes SET cordoned = ?, cordon_reason = ?, cordoned_by = ?, cordoned_at = ? WHERE node_id = ?",
		cordoned, TruncateUTF8(reason, nodeReasonMax), TruncateUTF8(by, nodeActorMax), at, id); err != nil {
		return store.Node{}, err
	}
	n, err := e.d.scanNode(e.w.QueryRowContext(ctx, "SELECT "+nodeColumns+" FROM nodes WHERE node_id = ?", id))
	if err != nil {
		return store.Node{}, fmt.Errorf("%s: %w", what, e.d.MapErr(err))
	}
	return n, nil
}

// scanNode reads a row of nodeColumns.
func (enc Encoding) scanNode(row Scanner) (store.Node, error) {
	var (
		n      store.Node
		labels string
	)
	if err := row.Scan(&n.ID, &labels, &n.Cordoned, &n.CordonReason, &n.CordonedBy, enc.atPtr(&n.CordonedAt),
		enc.at(&n.FirstSeen), enc.at(&n.LastSeen)); err != nil {
		return store.Node{}, err
	}
	var err error
	n.Labels, err = parseLabels(labels)
	return n, err
}

// labelsJSON is labels as stored: a JSON object, {} for none.
func labelsJSON(labels map[string]string) string {
	if labels == nil {
		labels = map[string]string{}
	}
	b, _ := json.Marshal(labels) // a map[string]string always marshals
	return string(b)
}

// parseLabels reads labels stored by labelsJSON; never nil.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("read node labels: %w", err)
	}
	if out == nil {
		out = map[string]string{}
	}
	return out, nil
}
