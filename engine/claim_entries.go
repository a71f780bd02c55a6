package engine

import (
	"context"
	"slices"

	"github.com/gpuorch/orchestrator/streams"
)

// The proof of a claim's items (ClaimParams.CheckEntries, Types). A worker claims the entries
// it read; a caller that invents an entry ({"job_id": "…", "message_id": "1-0"}) must not get
// the job, nor overwrite the job's stream_id with the invented id.
//
// An item is proven by the job's recorded entry (stream_id, compared in the transaction at no
// cost) or by Redis: the entry is pending for the claiming consumer in the job type's group.
// The recorded entry rarely settles it on the hot path: the submit's mark lands 100 ms after
// the entry (engine/marks.go), and most jobs are claimed before that. So the XPENDING round
// trip for every item that names a known stream is started before the transaction, and runs
// while the job rows are locked and read; the transaction waits for it only for the items the
// stream_id did not prove.

// entryCheck is the XPENDING check of a claim's items, running beside its transaction.
type entryCheck struct {
	done      chan struct{}
	delivered map[entryKey]bool
	err       error
}

// entryKey names an entry the claim checked.
type entryKey struct{ stream, id string }

// startEntryCheck starts the check of p's items that name an entry of a configured stream;
// nil when p asks for no check.
func (e *Engine) startEntryCheck(ctx context.Context, p ClaimParams) *entryCheck {
	if !p.CheckEntries || len(p.Items) == 0 {
		return nil
	}
	check := &entryCheck{done: make(chan struct{})}
	var entries []streams.PendingEntry
	for _, it := range p.Items {
		t := e.cfg.TypeOfStream(it.Stream)
		if t == nil || !streams.IsEntryID(it.MessageID) {
			continue
		}
		entries = append(entries, streams.PendingEntry{
			Stream: it.Stream, Group: streams.GroupName(t.Name), Consumer: p.WorkerID, ID: it.MessageID,
		})
	}
	if len(entries) == 0 {
		close(check.done)
		return check
	}
	go func() {
		defer close(check.done)
		got, err := e.streams.Delivered(ctx, entries)
		if err != nil {
			check.err = err
			return
		}
		check.delivered = make(map[entryKey]bool, len(entries))
		for i, ent := range entries {
			check.delivered[entryKey{ent.Stream, ent.ID}] = got[i]
		}
	}()
	return check
}

// wasDelivered reports whether c's item is an entry of its job type's stream that Redis
// delivered to the claiming consumer, waiting for the check.
func (e *Engine) wasDelivered(ctx context.Context, check *entryCheck, c candidate) (bool, error) {
	t := e.cfg.JobType(c.job.Type)
	if check == nil || t == nil || c.item.Stream != t.Stream {
		return false, nil
	}
	select {
	case <-check.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if check.err != nil {
		return false, check.err
	}
	return check.delivered[entryKey{c.item.Stream, c.item.MessageID}], nil
}

// admit keeps the candidates p may claim: of a type in its scope (p.Types) and, with
// p.CheckEntries, named by the job's recorded entry or an entry delivered to the consumer.
// The others are refused into res. It reports whether a GPU job is among those kept.
func (e *Engine) admit(ctx context.Context, p ClaimParams, check *entryCheck, cands []candidate, res *ClaimResult) ([]candidate, bool, error) {
	kept := cands[:0]
	gpuJobs := false
	for _, c := range cands {
		if p.Types != nil && !slices.Contains(p.Types, c.job.Type) {
			res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedOutOfScope})
			continue
		}
		if p.CheckEntries && (c.item.MessageID == "" || c.item.MessageID != c.job.StreamID) {
			ok, err := e.wasDelivered(ctx, check, c)
			if err != nil {
				return nil, false, err
			}
			if !ok {
				res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedNotDelivered})
				continue
			}
		}
		kept = append(kept, c)
		gpuJobs = gpuJobs || c.job.GPUMemoryMB > 0
	}
	return kept, gpuJobs, nil
}
