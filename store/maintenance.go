package store

import (
	"context"
	"time"
)

// StreamIDPurged is the stream_id of a dead letter an operator purged: the job stays
// dead_letter (its history is kept until retention deletes it) but it is no longer in the
// dead-letter queue, and enqueued=1 keeps the DLQ relay from publishing it again. A dead letter
// therefore has three states: enqueued=0 (not yet on the DLQ stream), enqueued=1 with the DLQ
// entry's id (listed, replayable), and enqueued=1 with StreamIDPurged.
const StreamIDPurged = "purged"

// DeadLetterPurged reports whether j is a dead letter an operator purged.
func (j Job) DeadLetterPurged() bool {
	return j.Status == JobDeadLetter && j.StreamID == StreamIDPurged
}

// DeadLetterListParams pages the dead-letter queue (dead_letter jobs that are not purged),
// newest first by (created_at DESC, job_id DESC); After is the last job of the previous page.
type DeadLetterListParams struct {
	Type  string // empty: any
	After *JobCursor
	Limit int
}

// JobScanParams walk the jobs of one type and status in job_id order (keyset), for work that
// must visit every such job once, such as re-publishing after Redis lost its data.
type JobScanParams struct {
	Type    string
	Status  JobStatus
	AfterID string // "" starts at the beginning
	Limit   int
}

// JobDeleteParams select terminal jobs to delete for retention. Only jobs whose finished_at
// (updated_at when it is NULL) is before Before are deleted, at most Limit per call, oldest
// created first.
type JobDeleteParams struct {
	Status JobStatus // done, cancelled or dead_letter; anything else deletes nothing
	Type   string    // empty: any type
	// ExceptTypes leaves out these types (the catch-all pass over types no longer configured).
	ExceptTypes []string
	// PurgedOnly restricts a dead_letter deletion to purged dead letters.
	PurgedOnly bool
	Before     time.Time
	Limit      int
}

// MaintenanceExecutor is the leader's housekeeping of orchestrator_jobs and orchestrator_audit:
// the dead-letter outbox and queue, the Redis-loss re-publication scan, and retention. Every
// statement touches few rows (bounded by a limit) so that no maintenance pass holds long locks.
type MaintenanceExecutor interface {
	// JobListDeadLetterUnpublished returns up to limit dead_letter jobs with enqueued=0 (not yet
	// on the DLQ stream), in available_at order, without their payloads (Payload nil).
	JobListDeadLetterUnpublished(ctx context.Context, limit int) ([]Job, error)
	// JobMarkDeadLetterPublished sets enqueued=1 and stream_id (the DLQ entry) for each mark
	// that still matches (dead_letter, enqueued=0, same attempts) and returns the ids it marked;
	// an entry whose mark did not apply (the job was replayed meanwhile) is the caller's to delete.
	JobMarkDeadLetterPublished(ctx context.Context, marks []JobEnqueued, now time.Time) (marked []string, err error)
	// JobMarkDeadLetterPurged sets stream_id=StreamIDPurged and enqueued=1 on a dead letter that
	// is not purged yet; ErrNotFound when the job does not exist, ErrConflict when it is not a
	// dead letter or already purged.
	JobMarkDeadLetterPurged(ctx context.Context, id string, now time.Time) error
	// JobListDeadLetters returns a page of the dead-letter queue.
	JobListDeadLetters(ctx context.Context, p DeadLetterListParams) ([]Job, error)
	// JobScan returns up to Limit jobs of one type and status with job_id > AfterID, in job_id
	// order, without their payloads (Payload nil): a scan may walk a million jobs.
	JobScan(ctx context.Context, p JobScanParams) ([]Job, error)
	// JobClearEnqueued sets enqueued=0 on the jobs among ids that have the given status, are
	// enqueued and are not purged dead letters (others are left alone), so that their outbox
	// relay publishes them again: the dispatcher for pending jobs (when due), the DLQ relay for
	// dead letters. It returns how many rows changed.
	JobClearEnqueued(ctx context.Context, status JobStatus, ids []string, now time.Time) (int, error)
	// JobDeleteTerminal deletes up to Limit terminal jobs past their retention (see
	// JobDeleteParams) and returns how many it deleted.
	JobDeleteTerminal(ctx context.Context, p JobDeleteParams) (int, error)
	// AuditDeleteBefore deletes up to limit audit rows with ts < before, in id order, and
	// returns how many it deleted. It stops at the first row not yet old enough (ids follow
	// time, except across instances' clocks), which holds back the rows after it.
	AuditDeleteBefore(ctx context.Context, before time.Time, limit int) (int, error)
	// LeaseDeleteEnded deletes up to limit ended leases (released or expired) that ended before
	// before, and returns how many it deleted. Active leases are never deleted. It finds them
	// through the (status, expires_at) index, so a released lease whose expiry was still ahead
	// when it ended may outlive its cut-off by at most its TTL.
	LeaseDeleteEnded(ctx context.Context, before time.Time, limit int) (int, error)
}
