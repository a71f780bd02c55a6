package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/store"
)

// submitCommitTimeout bounds one submit transaction. It does not follow the submitters'
// contexts: a batch holds many of them, and a job must not be half-submitted because one
// client hung up.
const submitCommitTimeout = 30 * time.Second

// submitReq is one validated job waiting for its commit.
type submitReq struct {
	ctx  context.Context // the submitter's: its trace, and whether it still waits
	p    SubmitParams
	jt   *config.JobType
	out  SubmitOutcome
	done chan struct{}
	// named: the optional fields the submit named (not the type's defaults).
	named named
	// flow is what the submit asks of a flow (depends_on, …); nil for a plain job, which
	// takes the group commit.
	flow *flowSpec
}

func newSubmitReq(ctx context.Context, p SubmitParams, jt *config.JobType) *submitReq {
	return &submitReq{ctx: ctx, p: p, jt: jt, done: make(chan struct{})}
}

func (r *submitReq) finish(out SubmitOutcome) {
	r.out = out
	close(r.done)
}

func (r *submitReq) insertParams(now time.Time) store.JobInsertParams {
	return store.JobInsertParams{
		ID:           r.p.JobID,
		Type:         r.p.Type,
		Agent:        r.p.Agent,
		Payload:      r.p.Payload,
		MaxAttempts:  r.p.MaxAttempts,
		AvailableAt:  now,
		GPUMemoryMB:  r.p.Resources.GPUMemoryMB,
		GPUs:         r.p.Resources.GPUs,
		GPUExclusive: r.p.Resources.Exclusive,
		Priority:     *r.p.Priority,
		Constraints:  r.p.Constraints,
		PoolID:       r.p.PoolID,
		ModelID:      r.p.ModelID,
		Timeout:      r.p.Timeout,
		Now:          now,
		CallbackURL:  r.p.CallbackURL,
	}
}

func (r *submitReq) submittedEvent(job store.Job, now time.Time) store.AuditEvent {
	// A struct, not a map: its fields in the keys' sorted order write the same JSON at a
	// fraction of the cost, once per job.
	details, _ := json.Marshal(struct {
		Agent       string `json:"agent"`
		MaxAttempts int    `json:"max_attempts"`
		Type        string `json:"type"`
	}{r.p.Agent, r.p.MaxAttempts, r.p.Type})
	return store.AuditEvent{TS: now, EventType: EventSubmitted, JobID: job.ID, Actor: r.p.Actor, Details: details}
}

// commitBatch commits one batch: submitters that are gone are answered, not written; an id
// that appears twice goes alone after the others (and finds the first).
func (e *Engine) commitBatch(batch []*submitReq) {
	ctx, cancel := context.WithTimeout(context.Background(), submitCommitTimeout)
	defer cancel()
	var (
		first = make([]*submitReq, 0, len(batch))
		again []*submitReq
		seen  = make(map[string]bool, len(batch))
	)
	for _, r := range batch {
		switch {
		case r.ctx.Err() != nil:
			r.finish(SubmitOutcome{Err: fmt.Errorf("submit job: %w", r.ctx.Err())})
		case seen[r.p.JobID]:
			again = append(again, r)
		default:
			seen[r.p.JobID] = true
			first = append(first, r)
		}
	}
	if len(first) > 0 {
		e.submitMany(ctx, first)
	}
	for _, r := range again {
		r.finish(e.submitOne(ctx, r))
	}
}

// dependencyDown reports whether a failed submit transaction failed because the database is
// out of reach or the commit's time is up, rather than for the data of one of its jobs: then
// trying its jobs again in halves would only hammer a database that is down.
func dependencyDown(ctx context.Context, err error) bool {
	return ctx.Err() != nil ||
		errors.Is(err, store.ErrUnavailable) || // the drivers mark a database that cannot serve now
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) ||
		errors.Is(err, sql.ErrConnDone)
}
