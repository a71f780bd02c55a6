package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/internal/strictjson"
	"github.com/gpuorch/orchestrator/store"
)

// Submit limits.
const (
	// MaxAttemptsLimit bounds a job's attempt budget.
	MaxAttemptsLimit = 100
	// MaxTimeout bounds a job's per-attempt run time.
	MaxTimeout = 24 * time.Hour
	// publishInTxMin is the size from which a submit transaction publishes its jobs before it
	// commits, with their marks in the COMMIT's packet: one round trip more, paid by many jobs,
	// and marks that cannot fall behind a bulk fill (the mark writer is one UPDATE at a time).
	// Smaller batches (single submits under load) commit in one round trip and publish after.
	publishInTxMin = 64
)

// JobIDPattern is what a client-supplied job id must match.
var JobIDPattern = ident.Pattern{Min: 1, Max: 128}

// AgentPattern is what an agent name must match (tokens bind agent names too).
var AgentPattern = ident.Pattern{Min: 1, Max: 128}

// Submit validates p and inserts the job (pending) and its audit row in one transaction, then
// publishes the job to its type's stream; its enqueued mark is written a moment later (see
// outbox.Outbox.PublishSubmitted). A transaction of publishInTxMin jobs or more publishes
// them before it commits instead, and its COMMIT carries their marks (PublishInTx). A job_id
// that exists already returns the existing job with created=false and writes nothing when p
// repeats its request (sameRequest), and a *MismatchError when it does not; an existing job_id
// of another agent is a conflict. A failed publish is not an error: the job stays unpublished
// and the outbox's Dispatcher publishes it.
//
// Concurrent submits are committed together (the outbox's group commit): Submit returns
// once the transaction holding its job has committed, never before. A transaction of fewer
// than publishInTxMin jobs answers first and publishes after, so the returned job is not yet
// marked enqueued and its entry may come a moment later (FlushMarks waits for it).
func (e *Engine) Submit(ctx context.Context, p SubmitParams) (store.Job, bool, error) {
	r, err := e.prepare(ctx, p)
	if err != nil {
		return store.Job{}, false, err
	}
	if r.flow != nil {
		out := e.submitFlow(ctx, r)
		return out.Job, out.Created, out.Err
	}
	e.outbox.Enqueue(r)
	<-r.done
	return r.out.Job, r.out.Created, r.out.Err
}

// SubmitOutcome is the answer to one job of SubmitMany.
type SubmitOutcome struct {
	Job     store.Job
	Created bool
	// Err is a *ValidationError, an *UnsatisfiableError, a *MismatchError, store.ErrConflict
	// (another agent's id), or a database error.
	Err error
}

// SubmitMany submits jobs as Submit does, each validated on its own: an invalid job is refused
// in its outcome and the others go ahead. The valid jobs are committed together (in as few
// transactions as the group commit makes of them) and published with one pipeline; the
// outcomes are in the order of ps. The jobs of flows (depends_on, …) go after the others, one
// transaction each in the order of ps, so that they may depend on jobs earlier in the batch.
func (e *Engine) SubmitMany(ctx context.Context, ps []SubmitParams) []SubmitOutcome {
	out := make([]SubmitOutcome, len(ps))
	reqs := make([]*submitReq, 0, len(ps))
	at := make([]int, 0, len(ps))
	var flows []int
	for i := range ps {
		if ps[i].isFlow() {
			flows = append(flows, i)
			continue
		}
		r, err := e.prepare(ctx, ps[i])
		if err != nil {
			out[i].Err = err
			continue
		}
		if r.flow != nil { // an approval holds it (approvals.go)
			flows = append(flows, i)
			continue
		}
		reqs = append(reqs, r)
		at = append(at, i)
	}
	e.outbox.Enqueue(reqs...)
	for k, r := range reqs {
		<-r.done
		out[at[k]] = r.out
	}
	for _, i := range flows {
		out[i].Job, out[i].Created, out[i].Err = e.Submit(ctx, ps[i])
	}
	return out
}

// submitOne is the submit of one job in its own transaction: it tells a new job from an
// existing one (JobInsert), which a batch insert cannot. It is the path of a job whose id was
// taken in its batch: two round trips, the first of which says whether the id exists.
func (e *Engine) submitOne(ctx context.Context, r *submitReq) SubmitOutcome {
	p, now := r.p, e.nowUTC()
	var (
		job     store.Job
		created bool
	)
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		var err error
		job, created, err = tx.JobInsert(ctx, r.insertParams(now))
		if err != nil || !created {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{r.submittedEvent(job, now)})
	})
	if err != nil {
		return SubmitOutcome{Err: fmt.Errorf("submit job: %w", err)}
	}
	switch {
	case created:
		jobs := []store.Job{job}
		e.outbox.PublishSubmitted(ctx, jobs, []context.Context{r.ctx})
		return SubmitOutcome{Job: jobs[0], Created: true}
	case job.Agent != p.Agent:
		return SubmitOutcome{Err: fmt.Errorf("submit job %s: the id belongs to another agent: %w", p.JobID, store.ErrConflict)}
	}
	if err := e.sameRequest(r, job); err != nil {
		return SubmitOutcome{Err: err}
	}
	return SubmitOutcome{Job: job}
}

// submitMany commits new jobs with one multi-row insert and their audit rows in one
// transaction, which MariaDB receives in one round trip with its COMMIT, and then publishes
// them; from publishInTxMin jobs on, it publishes them before the commit instead (see
// outbox.Outbox.PublishInTx). When any of the ids exists already the transaction rolls back
// and every job goes through submitOne instead, which tells new ids from taken ones.
//
// A transaction that fails otherwise may have failed for one job's own data (a value the
// database refuses that the checks before let through: a payload SQLite's json_valid finds
// too deep, a string MariaDB's utf8mb4 refuses), which must not fail the other submitters'
// jobs: unless the database is out of reach (dependencyDown), the jobs go again in two halves,
// and so on, so that each failing job fails alone and the others commit. Halving costs about
// 2·log2(n) transactions per failing job; one at a time would cost n.
func (e *Engine) submitMany(ctx context.Context, reqs []*submitReq) {
	e.submitHalves(ctx, reqs, false)
}

// submitHalves is submitMany of reqs, a half of a failed transaction's jobs when halved.
func (e *Engine) submitHalves(ctx context.Context, reqs []*submitReq, halved bool) {
	now := e.nowUTC()
	inTx := len(reqs) >= publishInTxMin
	var jobs []store.Job
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		ps := make([]store.JobInsertParams, len(reqs))
		for i, r := range reqs {
			ps[i] = r.insertParams(now)
		}
		var err error
		if jobs, err = tx.JobInsertMany(ctx, ps); err != nil {
			return err
		}
		events := make([]store.AuditEvent, len(reqs))
		for i, r := range reqs {
			events[i] = r.submittedEvent(jobs[i], now)
		}
		if err := tx.AuditInsert(ctx, events); err != nil {
			return err
		}
		if inTx {
			return e.outbox.PublishInTx(ctx, tx, jobs, submitters(reqs))
		}
		return nil
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		for _, r := range reqs {
			r.finish(e.submitOne(ctx, r))
		}
		return
	case err != nil && len(reqs) > 1 && !dependencyDown(ctx, err):
		if !halved {
			e.log.Warn("a submit transaction failed; its jobs go again in halves, so that a job that fails it fails alone",
				"jobs", len(reqs), "first_job_id", reqs[0].p.JobID, "error", err)
		}
		half := len(reqs) / 2
		e.submitHalves(ctx, reqs[:half], true)
		e.submitHalves(ctx, reqs[half:], true)
		return
	case err != nil:
		if halved && len(reqs) == 1 && !dependencyDown(ctx, err) {
			e.log.Error("a job failed its submit transaction alone: the database refused its data", "job_id", reqs[0].p.JobID,
				"agent", reqs[0].p.Agent, "error", err)
		}
		for _, r := range reqs {
			r.finish(SubmitOutcome{Err: fmt.Errorf("submit job: %w", err)})
		}
		return
	}
	// The jobs are committed, so their submitters have their answer now, and a publish that
	// did not happen in the transaction follows: the outbox's point (the dispatcher publishes
	// what a failed or cut-short publish leaves). An answer carries a copy of its job, whose
	// marks the publish then sets on jobs.
	if !inTx {
		defer e.outbox.HoldAnswered()()
	}
	for i, r := range reqs {
		r.finish(SubmitOutcome{Job: jobs[i], Created: true})
	}
	if !inTx {
		e.outbox.PublishSubmitted(ctx, jobs, submitters(reqs))
	}
}

// submitters are the contexts of reqs' submitters, whose traces their entries carry.
func submitters(reqs []*submitReq) []context.Context {
	out := make([]context.Context, len(reqs))
	for i, r := range reqs {
		out[i] = r.ctx
	}
	return out
}

// PublishDue publishes up to limit due jobs that are not enqueued, marking them behind fence:
// the work of an outbox.Dispatcher, on the engine's clock.
func (e *Engine) PublishDue(ctx context.Context, fence Fence, limit int) (published int, full bool, err error) {
	return e.outbox.PublishDue(ctx, fence, e.nowUTC(), limit)
}

// FlushMarks writes the queued enqueued marks of submitted jobs now (outbox.Outbox.FlushMarks):
// at shutdown, once no submit is in flight, and in tests.
func (e *Engine) FlushMarks(ctx context.Context) { e.outbox.FlushMarks(ctx) }

// maxListedTypes bounds the configured types an unknown-type message names.
const maxListedTypes = 20

// UnknownTypeMessage says that a submit's type is not configured, which types are (at most
// maxListedTypes of them), and where a type is configured: a newcomer who submits a type the
// server does not know learns how to add it.
func UnknownTypeMessage(cfg *config.Config, name string) string {
	names := cfg.TypeNames()
	known := "none"
	if len(names) > 0 {
		shown := names[:min(len(names), maxListedTypes)]
		known = strings.Join(shown, ", ")
		if more := len(names) - len(shown); more > 0 {
			known += fmt.Sprintf(" and %d more", more)
		}
	}
	return fmt.Sprintf("unknown job type %q (configured: %s); a type is configured under job_types in "+
		"the configuration file named by ORCH_CONFIG (see docs/configuration.md#job-types)", name, known)
}

// prepare validates p, fills in its type's defaults and checks that the cluster could ever
// place its GPUs; the request remembers which optional fields p named, which a resubmit of its
// id must repeat (sameRequest).
func (e *Engine) prepare(ctx context.Context, p SubmitParams) (*submitReq, error) {
	named := namedFields(p)
	jt, err := e.validateSubmit(&p)
	if err != nil {
		return nil, err
	}
	if err := e.checkPlaceable(ctx, p.Resources, p.Constraints); err != nil {
		return nil, err
	}
	if err := e.checkRouted(ctx, p, jt); err != nil {
		return nil, err
	}
	r := newSubmitReq(ctx, p, jt)
	r.named = named
	if r.flow, err = e.prepareFlow(ctx, &r.p); err != nil {
		return nil, err
	}
	return r, nil
}

// ScheduleJobPrefix starts the ids of the jobs schedules make (schedules.JobID), whose submits'
// actors start with ScheduleActorPrefix: no other submit may take such an id.
const (
	ScheduleJobPrefix   = "sch-"
	ScheduleActorPrefix = "schedule:"
)

// validateSubmit checks p, fills defaults from the job type and returns the type.
func (e *Engine) validateSubmit(p *SubmitParams) (*config.JobType, error) {
	if p.JobID == "" {
		p.JobID = NewJobID()
	} else if !JobIDPattern.MatchString(p.JobID) {
		return nil, invalid("job_id", "must be %s", JobIDPattern.Rule())
	} else if strings.HasPrefix(p.JobID, ScheduleJobPrefix) && !strings.HasPrefix(p.Actor, ScheduleActorPrefix) {
		// A schedule's fire finds its job by id: a job of that id made by anyone else would
		// be taken for the fire's.
		return nil, invalid("job_id", "the prefix %s is reserved for the jobs of schedules", ScheduleJobPrefix)
	}
	if p.Type == "" {
		return nil, invalid("type", "is required")
	}
	jt := e.cfg.JobType(p.Type)
	if jt == nil {
		return nil, invalid("type", "%s", UnknownTypeMessage(e.cfg, p.Type))
	}
	if p.Agent == "" {
		return nil, invalid("agent", "is required")
	}
	if !AgentPattern.MatchString(p.Agent) {
		return nil, invalid("agent", "must be %s", AgentPattern.Rule())
	}
	if len(p.Payload) == 0 {
		return nil, invalid("payload", "is required (any JSON value)")
	}
	if int64(len(p.Payload)) > e.cfg.MaxPayloadBytes {
		return nil, invalid("payload", "is %d bytes, over the limit of %d", len(p.Payload), e.cfg.MaxPayloadBytes)
	}
	if !p.PayloadChecked {
		if !json.Valid(p.Payload) {
			return nil, invalid("payload", "is not valid JSON")
		}
		// What the API's decoder refuses in a payload, within a body one level up.
		if prob := strictjson.Check(p.Payload, strictjson.Any, strictjson.MaxDepth, 1); prob != nil {
			field := "payload"
			switch {
			case strings.HasPrefix(prob.Path, "["):
				field += prob.Path
			case prob.Path != "":
				field += "." + prob.Path
			}
			return nil, invalid(field, "%s", prob.Message)
		}
	}
	switch {
	case p.MaxAttempts == 0:
		p.MaxAttempts = jt.MaxAttempts
	case p.MaxAttempts < 1 || p.MaxAttempts > MaxAttemptsLimit:
		return nil, invalid("max_attempts", "must be in 1..%d", MaxAttemptsLimit)
	}
	switch {
	case p.Timeout == 0:
		p.Timeout = jt.Timeout
	case p.Timeout < time.Millisecond || p.Timeout > MaxTimeout:
		return nil, invalid("timeout", "must be between 1ms and %s", MaxTimeout)
	}
	res, err := resourcesOf(p.Resources, jt)
	if err != nil {
		return nil, err
	}
	p.Resources = &res
	if p.Constraints, err = checkConstraints(p.Constraints); err != nil {
		return nil, err
	}
	if err := checkRoute(p); err != nil {
		return nil, err
	}
	if err := e.checkCallback(p); err != nil {
		return nil, err
	}
	if e.cfg.Scheduler.Disabled {
		for field, set := range map[string]bool{"constraints": p.Constraints != nil, "pool_id": p.PoolID != "", "model_id": p.ModelID != ""} {
			if set {
				return nil, invalid(field, "needs the scheduler, which this cluster runs without (scheduler.disabled): "+
					"a worker's claim would place the job wherever it was read")
			}
		}
	}
	switch {
	case p.Priority == nil:
		p.Priority = &jt.Priority
	case *p.Priority < 0 || *p.Priority > MaxPriority:
		return nil, invalid("priority", "must be in 0..%d", MaxPriority)
	}
	return jt, nil
}

// NewJobID returns a fresh job id: "j" + 48 bits of milliseconds + 80 random bits, hex, so ids
// sort roughly by creation time.
func NewJobID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return fmt.Sprintf("j%x", b[:])
}
