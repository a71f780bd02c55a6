package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/tracing"
)

// Submit limits.
const (
	// MaxAttemptsLimit bounds a job's attempt budget.
	MaxAttemptsLimit = 100
	// MaxTimeout bounds a job's per-attempt run time.
	MaxTimeout = 24 * time.Hour
	// publishTimeout bounds the XADD after a submit's commit: past it, the dispatcher publishes.
	publishTimeout = 2 * time.Second
)

// JobIDPattern is what a client-supplied job id must match.
var JobIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// AgentPattern is what an agent name must match (tokens bind agent names too).
var AgentPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// Submit validates p, inserts the job (pending, not enqueued) and its audit row in one
// transaction, then publishes it to its type's stream and marks it enqueued (the outbox). A
// job_id that exists already returns the existing job with created=false and writes nothing; an
// existing job_id of another agent is a conflict. A failed publish is not an error: the job is
// committed and the dispatcher publishes it.
func (e *Engine) Submit(ctx context.Context, p SubmitParams) (store.Job, bool, error) {
	jt, err := e.validateSubmit(&p)
	if err != nil {
		return store.Job{}, false, err
	}
	now := e.nowUTC()
	var (
		job     store.Job
		created bool
	)
	err = e.store.WithTx(ctx, func(tx store.Tx) error {
		var err error
		job, created, err = tx.JobInsert(ctx, store.JobInsertParams{
			ID:          p.JobID,
			Type:        p.Type,
			Agent:       p.Agent,
			Payload:     p.Payload,
			MaxAttempts: p.MaxAttempts,
			AvailableAt: now,
			GPUMemoryMB: jt.GPUMemoryMB,
			Timeout:     p.Timeout,
			Now:         now,
		})
		if err != nil || !created {
			return err
		}
		details, _ := json.Marshal(map[string]any{"type": p.Type, "agent": p.Agent, "max_attempts": p.MaxAttempts})
		return tx.AuditInsert(ctx, []store.AuditEvent{{
			TS: now, EventType: EventSubmitted, JobID: job.ID, Actor: p.Actor, Details: details,
		}})
	})
	if err != nil {
		return store.Job{}, false, fmt.Errorf("submit job: %w", err)
	}
	if !created {
		if job.Agent != p.Agent {
			return store.Job{}, false, fmt.Errorf("submit job %s: the id belongs to another agent: %w", p.JobID, store.ErrConflict)
		}
		return job, false, nil
	}
	// The job is durable; from here on nothing may fail the submit. The publish must not be cut
	// short by a client that hangs up after the commit.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if _, err := e.publish(pctx, []store.Job{job}); err != nil {
		e.log.Warn("publish after submit failed; the dispatcher will publish", "job_id", job.ID, "error", err)
	} else {
		job.Enqueued = true
	}
	return job, true, nil
}

// publish XADDs one entry per job and marks the jobs enqueued for their current attempt count.
// It returns how many jobs it published.
func (e *Engine) publish(ctx context.Context, jobs []store.Job) (int, error) {
	return e.publishFenced(ctx, jobs, nil)
}

// publishFenced is publish whose enqueued marks are a leader-only write behind fence (nil: no
// fencing). The XADD itself cannot be fenced; a stale leader's extra entry is a harmless
// duplicate, but its mark must not land.
func (e *Engine) publishFenced(ctx context.Context, jobs []store.Job, fence Fence) (int, error) {
	return e.publishWith(ctx, jobs, fence, true)
}

// publishUnmarked XADDs entries for jobs without touching their outbox flag: for jobs that are
// claimed or running, whose row may move on (fail, go back to pending with backoff) before a
// mark could land, and a mark would then hide that retry from the dispatcher.
func (e *Engine) publishUnmarked(ctx context.Context, jobs []store.Job) (int, error) {
	return e.publishWith(ctx, jobs, nil, false)
}

// publishWith publishes jobs and, when mark is set, marks them enqueued behind fence.
func (e *Engine) publishWith(ctx context.Context, jobs []store.Job, fence Fence, markThem bool) (_ int, err error) {
	ctx, span := tracing.Start(ctx, "engine.publish", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.Int("jobs", len(jobs))))
	defer func() { tracing.End(span, err) }()
	traceParent := tracing.TraceParent(ctx) // the entries carry the trace to the workers
	msgs := make([]streams.Message, 0, len(jobs))
	for _, j := range jobs {
		jt := e.cfg.JobType(j.Type)
		if jt == nil {
			e.log.Error("job of an unconfigured type cannot be published", "job_id", j.ID, "type", j.Type)
			continue
		}
		msgs = append(msgs, streams.Message{Stream: jt.Stream, JobID: j.ID, Type: j.Type, Attempt: j.Attempts, TraceParent: traceParent})
	}
	ids, err := e.streams.Publish(ctx, msgs)
	if err != nil || !markThem {
		return len(ids), err
	}
	marks := make([]store.JobEnqueued, len(msgs))
	for i, m := range msgs {
		marks[i] = store.JobEnqueued{ID: m.JobID, Attempts: m.Attempt, StreamID: ids[i]}
	}
	mark := func(x store.Executor) error {
		_, err := x.JobMarkEnqueued(ctx, marks)
		return err
	}
	if fence != nil {
		err = e.fenced(ctx, fence, func(tx store.Tx) error { return mark(tx) })
	} else {
		err = mark(e.store)
	}
	if err != nil {
		return len(msgs), fmt.Errorf("mark %d jobs enqueued: %w", len(marks), err)
	}
	return len(msgs), nil
}

// validateSubmit checks p, fills defaults from the job type and returns the type.
func (e *Engine) validateSubmit(p *SubmitParams) (*config.JobType, error) {
	if p.JobID == "" {
		p.JobID = NewJobID()
	} else if !JobIDPattern.MatchString(p.JobID) {
		return nil, invalid("job_id", "must match %s", JobIDPattern)
	}
	if p.Type == "" {
		return nil, invalid("type", "is required")
	}
	jt := e.cfg.JobType(p.Type)
	if jt == nil {
		return nil, invalid("type", "unknown job type %q (known: %s)", p.Type, strings.Join(e.cfg.TypeNames(), ", "))
	}
	if p.Agent == "" {
		return nil, invalid("agent", "is required")
	}
	if !AgentPattern.MatchString(p.Agent) {
		return nil, invalid("agent", "must match %s", AgentPattern)
	}
	if len(p.Payload) == 0 {
		return nil, invalid("payload", "is required (any JSON value)")
	}
	if int64(len(p.Payload)) > e.cfg.MaxPayloadBytes {
		return nil, invalid("payload", "is %d bytes, over the limit of %d", len(p.Payload), e.cfg.MaxPayloadBytes)
	}
	if !json.Valid(p.Payload) {
		return nil, invalid("payload", "is not valid JSON")
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
