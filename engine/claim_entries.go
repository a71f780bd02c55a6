package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// The proof of a claim's items (ClaimParams.CheckEntries, Types). A worker claims the entries
// it read; a caller that invents an entry ({"job_id": "…", "message_id": "1-0"}) must not get
// the job, nor overwrite the job's stream_id with the invented id.
//
// An item is proven by the job's recorded entry (stream_id, compared in the transaction at no
// cost) or by Redis: the entry is pending for the claiming consumer in the job type's group.
// The recorded entry rarely settles it on the hot path: the submit's mark lands 100 ms after
// the entry (engine/marks.go), and most jobs are claimed before that. So Redis is asked about
// every item that names an entry of a configured stream, in one pipelined XPENDING round trip,
// before the transaction: a Redis that hangs then holds no job row locked and takes nothing
// from the TTL of the leases the claim grants (their expiry counts from after the check), and
// the check gives up after entryCheckTimeout, failing the claim as unavailable (503; the
// worker tries again, its held leases renewed meanwhile without Redis).

// entryCheckTimeout bounds the XPENDING round trip of a claim.
const entryCheckTimeout = time.Second

// entryKey names an entry the claim checked.
type entryKey struct{ stream, id string }

// checkEntries asks Redis which of p's items are entries delivered to the claiming consumer;
// nil when p asks for no check.
func (e *Engine) checkEntries(ctx context.Context, p ClaimParams) (map[entryKey]bool, error) {
	if !p.CheckEntries || len(p.Items) == 0 {
		return nil, nil
	}
	var entries []streams.PendingEntry
	for _, it := range p.Items {
		base, target, placed := streams.SplitNodeStream(it.Stream)
		t := e.cfg.TypeOfStream(base)
		if t == nil || !streams.IsEntryID(it.MessageID) || (placed && !ownTarget(target, p)) {
			continue
		}
		entries = append(entries, streams.PendingEntry{
			Stream: it.Stream, Group: streams.GroupName(t.Name), Consumer: p.WorkerID, ID: it.MessageID,
		})
	}
	delivered := make(map[entryKey]bool, len(entries))
	if len(entries) == 0 {
		return delivered, nil
	}
	cctx, cancel := context.WithTimeout(ctx, entryCheckTimeout)
	defer cancel()
	got, err := e.streams.Delivered(cctx, entries)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("check the claimed entries: redis did not answer within %s: %w: %w",
				entryCheckTimeout, streams.ErrUnavailable, err)
		}
		return nil, fmt.Errorf("check the claimed entries: %w", err)
	}
	for i, ent := range entries {
		delivered[entryKey{ent.Stream, ent.ID}] = got[i]
	}
	return delivered, nil
}

// wasDelivered reports whether c's item is an entry of its job type's stream (or of the type's
// stream of a placement target of the claiming worker: its node, or its pool there) that Redis
// delivered to the claiming consumer.
func (e *Engine) wasDelivered(delivered map[entryKey]bool, c candidate, p ClaimParams) bool {
	t := e.cfg.JobType(c.job.Type)
	if t == nil {
		return false
	}
	if c.item.Stream != t.Stream {
		base, target, placed := streams.SplitNodeStream(c.item.Stream)
		if !placed || base != t.Stream || !ownTarget(target, p) {
			return false
		}
	}
	return delivered[entryKey{c.item.Stream, c.item.MessageID}]
}

// ownTarget reports whether a placement target is the claiming worker's: its node, or its pool
// on its node.
func ownTarget(target string, p ClaimParams) bool {
	node, pool := store.SplitTarget(target)
	return node == p.NodeID && (pool == "" || pool == p.PoolID)
}

// admit keeps the candidates p may claim: of a type in its scope (p.Types) and, with
// p.CheckEntries, named by the job's recorded entry or an entry delivered to the consumer.
// The others are refused into res. It reports whether a GPU job is among those kept.
func (e *Engine) admit(p ClaimParams, delivered map[entryKey]bool, cands []candidate, res *ClaimResult) ([]candidate, bool) {
	kept := cands[:0]
	gpuJobs := false
	for _, c := range cands {
		if p.Types != nil && !slices.Contains(p.Types, c.job.Type) {
			res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedOutOfScope})
			continue
		}
		if p.CheckEntries && (c.item.MessageID == "" || c.item.MessageID != c.job.StreamID) {
			if !e.wasDelivered(delivered, c, p) {
				res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedNotDelivered})
				continue
			}
		}
		kept = append(kept, c)
		gpuJobs = gpuJobs || needsNode(c.job)
	}
	return kept, gpuJobs
}
