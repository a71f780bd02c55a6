package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// recoveryBatch is how many jobs one page of the re-publication walks.
const recoveryBatch = 500

// Reading the recent entries of a stream (recentEntries).
const (
	// recentEntriesPage is how many entries one XRANGE reads.
	recentEntriesPage = 1000
	// recentEntriesMax bounds the entries one recovery reads per stream: a few times
	// outbox.PublishGrace of submits at a high rate.
	recentEntriesMax = 200_000
)

// Reasons RecoverRedis gives for a recovery.
const (
	RecoveryMarkerMissing = "marker_missing" // FLUSHALL, keys deleted, restart without persistence, first start
	RecoveryRunIDChanged  = "run_id_changed" // restart or failover: the newest writes may be gone
	RecoveryGroupMissing  = "group_missing"  // a consumer group (or its stream) is gone
)

// RecoveryResult says what RecoverRedis found and did.
type RecoveryResult struct {
	// Reason is why Redis was considered to have lost data; "" when it was not (nothing done).
	Reason string
	// Republished counts the non-terminal jobs published again.
	Republished int
	// Requeued counts the jobs handed back to an outbox relay instead (pending jobs not due
	// yet, for the dispatcher; dead letters whose DLQ entry is gone, for the DLQ relay).
	Requeued int
	// Present counts the live jobs whose entry is still in the stream: nothing was lost for
	// them (a first start, or a loss of other keys), and they are not published again.
	Present int
}

// RecoverRedis detects that Redis lost the orchestrator's data and repairs it; the database is
// the truth, so nothing is lost for good. Redis is considered to have lost data when the
// marker key is gone (FLUSHALL, deleted keys, a restart without persistence, or a first
// start), when the server's run_id differs from the one recorded in it (a restart or failover
// may have dropped the newest writes), or when a consumer group is missing. Then every consumer
// group is created again (from the stream's start), every non-terminal job whose entry is gone
// is published again (a duplicate would be harmless: claiming is a compare-and-set, but a
// first start after many submits would double the stream), dead letters whose DLQ entry is
// gone are handed to the DLQ relay, and the marker records the run_id. A job whose entry
// survived is left to the group, which delivers it, and to the reclaimer. The marker is first
// set to a unique "recovering" value and swapped for the run_id only at the end, so a recovery
// that fails, or a loss that happens during it, is detected again on the next call.
func (e *Engine) RecoverRedis(ctx context.Context, fence Fence) (RecoveryResult, error) {
	reason, runID, err := e.detectRedisLoss(ctx)
	if err != nil || reason == "" {
		return RecoveryResult{}, err
	}
	res := RecoveryResult{Reason: reason}
	if e.redisStartsEmpty && reason == RecoveryMarkerMissing {
		e.log.Info("redis starts empty; creating groups and publishing every live job", "reason", reason, "run_id", runID)
	} else {
		e.log.Warn("redis lost data; recreating groups and publishing every live job again", "reason", reason, "run_id", runID)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := "recovering:" + hex.EncodeToString(b[:])
	if err := e.streams.SetMarker(ctx, token); err != nil {
		return res, fmt.Errorf("recover redis: %w", err)
	}
	for _, name := range e.cfg.TypeNames() {
		if err := e.streams.EnsureGroup(ctx, e.cfg.JobTypes[name].Stream, streams.GroupName(name)); err != nil {
			return res, fmt.Errorf("recover redis: %w", err)
		}
	}
	// The jobs their submits may still be publishing were created within outbox.PublishGrace of the
	// walk; their entries are looked for from a grace before that, for the clocks of Redis and
	// of this host.
	recent := map[string]*recentEntries{}
	since := streams.EntryIDAt(e.nowUTC().Add(-2 * outbox.PublishGrace))
	for _, name := range e.cfg.TypeNames() {
		recent[e.cfg.JobTypes[name].Stream] = &recentEntries{next: since, jobs: map[string]bool{}}
	}
	for _, name := range e.cfg.TypeNames() {
		for _, st := range []store.JobStatus{store.JobPending, store.JobClaimed, store.JobRunning, store.JobDeadLetter} {
			if err := e.scanRecover(ctx, fence, name, st, recent, &res); err != nil {
				return res, fmt.Errorf("recover redis: %w", err)
			}
		}
	}
	ok, err := e.streams.SwapMarker(ctx, token, runID)
	if err != nil {
		return res, fmt.Errorf("recover redis: %w", err)
	}
	if !ok {
		return res, fmt.Errorf("recover redis: the marker changed during the recovery (data lost again?); the next pass recovers again")
	}
	e.log.Info("redis recovered", "reason", reason, "republished", res.Republished, "requeued", res.Requeued,
		"present", res.Present)
	return res, nil
}

// detectRedisLoss returns the reason to recover ("" for none) and the server's run_id.
func (e *Engine) detectRedisLoss(ctx context.Context) (reason, runID string, err error) {
	runID, err = e.streams.RunID(ctx)
	if err != nil {
		return "", "", fmt.Errorf("detect redis data loss: %w", err)
	}
	marker, found, err := e.streams.Marker(ctx)
	switch {
	case err != nil:
		return "", "", fmt.Errorf("detect redis data loss: %w", err)
	case !found:
		return RecoveryMarkerMissing, runID, nil
	case marker != runID:
		return RecoveryRunIDChanged, runID, nil
	}
	for _, name := range e.cfg.TypeNames() {
		ok, err := e.streams.GroupExists(ctx, e.cfg.JobTypes[name].Stream, streams.GroupName(name))
		if err != nil {
			return "", "", fmt.Errorf("detect redis data loss: %w", err)
		}
		if !ok {
			return RecoveryGroupMissing, runID, nil
		}
	}
	return "", runID, nil
}

// scanRecover walks the jobs of one type and status in pages and repairs their stream state.
func (e *Engine) scanRecover(ctx context.Context, fence Fence, typ string, st store.JobStatus, recent map[string]*recentEntries, res *RecoveryResult) error {
	after := ""
	for {
		jobs, err := e.store.JobScan(ctx, store.JobScanParams{Type: typ, Status: st, AfterID: after, Limit: recoveryBatch})
		if err != nil {
			return err
		}
		if len(jobs) == 0 {
			return nil
		}
		after = jobs[len(jobs)-1].ID
		if st == store.JobDeadLetter {
			err = e.recoverDeadLetters(ctx, fence, jobs, res)
		} else {
			err = e.recoverLive(ctx, fence, jobs, recent, res)
		}
		if err != nil {
			return err
		}
		if len(jobs) < recoveryBatch {
			return nil
		}
	}
}

// recoverLive publishes live jobs again, but for those whose entry survived. A pending job
// that is not due yet cannot be published now (a worker would refuse and drop the entry): its
// outbox flag is cleared instead, and the dispatcher publishes it when due. A claimed or
// running job is published too: the entry a worker reads is refused and dropped, which is
// harmless.
func (e *Engine) recoverLive(ctx context.Context, fence Fence, jobs []store.Job, recent map[string]*recentEntries, res *RecoveryResult) error {
	now := e.nowUTC()
	jobs, err := e.withoutEntries(ctx, jobs, now, res)
	if err != nil {
		return err
	}
	if jobs, err = e.withoutSubmitted(ctx, jobs, now, recent, res); err != nil {
		return err
	}
	var (
		due, live []store.Job
		unmark    []string
	)
	for _, j := range jobs {
		switch {
		case j.Status == store.JobPending && j.AvailableAt.After(now):
			if j.Enqueued {
				unmark = append(unmark, j.ID)
			}
			res.Requeued++
		case j.Status == store.JobPending:
			due = append(due, j)
		case j.Scheduled() && !e.cfg.Scheduler.Disabled:
			// A scheduled job's entry is in its node's stream, which the row does not
			// name once claimed: no entry is published for it. Its lease covers a lost
			// worker (the purger), and a second entry in the type's stream would only be
			// refused.
			res.Present++
		default:
			// Claimed or running: an entry lets the reclaimer settle the job should its worker
			// be gone, but no mark: the row may fail back to pending before a mark lands, and
			// a mark would hide that retry from the dispatcher.
			live = append(live, j)
		}
	}
	if err := e.clearEnqueued(ctx, fence, store.JobPending, unmark); err != nil {
		return err
	}
	n, err := e.outbox.Publish(ctx, due, outbox.Mark{Fence: fence})
	res.Republished += n
	if err != nil {
		return err
	}
	n, err = e.outbox.Publish(ctx, live, outbox.Mark{Skip: true})
	res.Republished += n
	return err
}

// withoutEntries drops the jobs whose current entry is still in their type's stream (counted
// in res.Present).
func (e *Engine) withoutEntries(ctx context.Context, jobs []store.Job, now time.Time, res *RecoveryResult) ([]store.Job, error) {
	byStream := map[string][]string{}
	for _, j := range jobs {
		if stream := e.entryStream(j, now); stream != "" {
			byStream[stream] = append(byStream[stream], j.StreamID)
		}
	}
	present := make(map[string]map[string]bool, len(byStream))
	for stream, ids := range byStream {
		exists, err := e.streams.EntriesExist(ctx, stream, ids)
		if err != nil {
			return nil, err
		}
		present[stream] = exists
	}
	out := make([]store.Job, 0, len(jobs))
	for _, j := range jobs {
		if stream := e.entryStream(j, now); stream != "" && present[stream][j.StreamID] {
			res.Present++
			continue
		}
		out = append(out, j)
	}
	return out, nil
}

// withoutSubmitted drops the jobs that their submits are still publishing and that have their
// entry (counted in res.Present): never attempted, due, created within outbox.PublishGrace and not
// marked enqueued yet, with an entry of theirs among the recent entries of the type's stream.
// Such a job's submit has published it and its mark is on its way (outbox.MarkDelay); publishing it
// again would only add a duplicate, which a recovery at a first start under load did by the
// hundred. One of them with no entry is published: its entry may have gone with the lost
// data, and its mark, landing later, would then hide it from the dispatcher.
func (e *Engine) withoutSubmitted(ctx context.Context, jobs []store.Job, now time.Time, recent map[string]*recentEntries, res *RecoveryResult) ([]store.Job, error) {
	for _, r := range recent {
		r.updated = false // this page's jobs may have been published since the last page's
	}
	out := make([]store.Job, 0, len(jobs))
	for _, j := range jobs {
		stream := e.submittingStream(j, now)
		if r := recent[stream]; r != nil {
			if err := r.update(ctx, e.streams, stream); err != nil {
				return nil, err
			}
			if r.jobs[j.ID] {
				res.Present++
				continue
			}
		}
		out = append(out, j)
	}
	return out, nil
}

// recentEntries holds the job ids named by a stream's entries from a point in time on. One
// recovery reads them once, as its first job that needs them comes, and tops them up with the
// entries added since as the walk goes on.
type recentEntries struct {
	next    string // the entry id the next read starts at
	jobs    map[string]bool
	read    int
	updated bool // read up to the stream's end for the page of jobs at hand
}

// update reads the entries added since the last read, once per page of jobs, up to
// recentEntriesMax in all.
func (r *recentEntries) update(ctx context.Context, sc *streams.Client, stream string) error {
	if r.updated {
		return nil
	}
	for r.read < recentEntriesMax {
		ids, next, err := sc.JobEntries(ctx, stream, r.next, min(recentEntriesPage, recentEntriesMax-r.read))
		if err != nil {
			return err
		}
		for _, id := range ids {
			r.jobs[id] = true
		}
		r.next, r.read = next, r.read+len(ids)
		if len(ids) < recentEntriesPage {
			break
		}
	}
	r.updated = true
	return nil
}

// submittingStream is the stream j's submit publishes it to when j may still be on its way
// there (see withoutSubmitted); "" otherwise.
func (e *Engine) submittingStream(j store.Job, now time.Time) string {
	jt := e.cfg.JobType(j.Type)
	if jt == nil || j.Status != store.JobPending || j.Enqueued || j.Attempts > 0 ||
		j.AvailableAt.After(now) || !j.CreatedAt.After(now.Add(-outbox.PublishGrace)) {
		return ""
	}
	if j.Status == store.JobPending && j.PlacedNode != "" {
		return streams.NodeStream(jt.Stream, j.PlacedNode) // the scheduler's placement
	}
	return jt.Stream
}

// entryStream is the stream whose entry j.StreamID is j's live entry: that of a due pending
// job marked enqueued, or of a claimed or running job; "" when j has none.
func (e *Engine) entryStream(j store.Job, now time.Time) string {
	jt := e.cfg.JobType(j.Type)
	if jt == nil || j.StreamID == "" || (j.Status == store.JobPending && (!j.Enqueued || j.AvailableAt.After(now))) {
		return ""
	}
	if j.Status == store.JobPending && j.PlacedNode != "" {
		return streams.NodeStream(jt.Stream, j.PlacedNode) // the scheduler's placement
	}
	return jt.Stream
}

// recoverDeadLetters hands the published dead letters whose DLQ entry is gone back to the
// DLQ relay (enqueued=0). Unpublished ones are the relay's already; purged ones stay out.
func (e *Engine) recoverDeadLetters(ctx context.Context, fence Fence, jobs []store.Job, res *RecoveryResult) error {
	var ids []string
	for _, j := range jobs {
		if id := dlqEntryOf(j); id != "" {
			ids = append(ids, id)
		}
	}
	exists, err := e.streams.DeadLettersExist(ctx, ids)
	if err != nil {
		return err
	}
	var unmark []string
	for _, j := range jobs {
		if id := dlqEntryOf(j); id != "" && !exists[id] {
			unmark = append(unmark, j.ID)
		}
	}
	res.Requeued += len(unmark)
	return e.clearEnqueued(ctx, fence, store.JobDeadLetter, unmark)
}

// clearEnqueued clears the outbox flag of ids (with status) behind fence.
func (e *Engine) clearEnqueued(ctx context.Context, fence Fence, status store.JobStatus, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return e.fenced(ctx, fence, func(tx store.Tx) error {
		_, err := tx.JobClearEnqueued(ctx, status, ids, e.nowUTC())
		return err
	})
}
