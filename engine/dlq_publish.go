package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// RelayDeadLetters publishes up to limit dead letters that are not on the DLQ stream yet and
// marks them published; full reports that the batch was full (more may be waiting). Entries
// whose mark did not apply (the job was replayed or purged in between) are deleted again.
// The loop that calls it is reclaimer.DLQRelay.
func (e *Engine) RelayDeadLetters(ctx context.Context, fence Fence, limit int) (published int, full bool, err error) {
	jobs, err := e.store.JobListDeadLetterUnpublished(ctx, limit)
	if err != nil {
		return 0, false, fmt.Errorf("relay dead letters: %w", err)
	}
	if len(jobs) == 0 {
		return 0, false, nil
	}
	dls := make([]streams.DeadLetter, len(jobs))
	for i, j := range jobs {
		origin := ""
		if jt := e.cfg.JobType(j.Type); jt != nil {
			origin = jt.Stream
		}
		dls[i] = streams.DeadLetter{JobID: j.ID, OriginStream: origin, Type: j.Type, Attempts: j.Attempts, LastError: j.LastError}
	}
	ids, err := e.streams.AddDeadLetters(ctx, dls)
	if err != nil {
		return 0, false, fmt.Errorf("relay dead letters: %w", err)
	}
	marks := make([]store.JobEnqueued, len(jobs))
	for i, j := range jobs {
		marks[i] = store.JobEnqueued{ID: j.ID, Attempts: j.Attempts, StreamID: ids[i]}
	}
	var marked []string
	err = e.fenced(ctx, fence, func(tx store.Tx) error {
		var err error
		marked, err = tx.JobMarkDeadLetterPublished(ctx, marks, e.nowUTC())
		return err
	})
	if err != nil {
		// The jobs stay unpublished and the next pass (or the next leader) publishes them
		// again: remove these entries so that they do not linger as duplicates.
		if _, derr := e.streams.DeleteDeadLetters(ctx, ids...); derr != nil {
			e.log.Warn("cannot delete the DLQ entries of unmarked dead letters", "count", len(ids), "error", derr)
		}
		return 0, false, fmt.Errorf("relay dead letters: mark %d published: %w", len(marks), err)
	}
	var orphans []string
	for _, m := range marks {
		if !slices.Contains(marked, m.ID) {
			orphans = append(orphans, m.StreamID)
		}
	}
	if _, err := e.streams.DeleteDeadLetters(ctx, orphans...); err != nil {
		e.log.Warn("cannot delete the DLQ entries of replayed dead letters", "count", len(orphans), "error", err)
	}
	return len(marked), len(jobs) >= limit, nil
}
