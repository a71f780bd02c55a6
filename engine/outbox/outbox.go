// Package outbox is how a committed job reaches its stream: the group commit that batches
// submits into few transactions, the publish paths (after the commit, inside it, and the
// relay's), the queue of enqueued marks written after a publish, and the Dispatcher, the
// leader's relay that publishes whatever those paths left unpublished.
//
// The rule it keeps is the outbox's: a job is committed before any worker may see it, every
// committed job is eventually published (a job without its enqueued mark is the Dispatcher's),
// and a duplicate entry is harmless (a claim is a compare-and-set on the job row).
package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/tracing"
)

// PublishTimeout bounds the XADD that follows a committed change (a submit, a replay): past
// it, the Dispatcher publishes.
const PublishTimeout = 2 * time.Second

// Store is what the outbox writes and reads: the enqueued marks, their fenced transactions,
// and the jobs the Dispatcher publishes (store.Store has it).
type Store interface {
	store.TxRunner
	JobMarkEnqueued(ctx context.Context, marks []store.JobEnqueued) (int, error)
	JobListDispatchable(ctx context.Context, p store.DispatchParams) ([]store.Job, error)
}

// Streams appends entries to the job streams (*streams.Client has it).
type Streams interface {
	Publish(ctx context.Context, msgs []streams.Message) ([]string, error)
}

// Options configure New.
type Options struct {
	// Store receives the marks; Streams the entries. Both required.
	Store   Store
	Streams Streams
	// StreamOf names the stream of a job type; false for a type that is not configured,
	// whose jobs are logged and not published.
	StreamOf func(jobType string) (stream string, ok bool)
	// Scheduled says the leader's scheduler places GPU jobs and jobs with constraints
	// (store.Job.Scheduled): a pending one that it has not placed is left for it (not
	// published, not marked), and a placed one goes to the node stream of its type on its
	// node (streams.NodeStream).
	Scheduled bool
	// Unplaced, when set, is called after a publish left jobs to the scheduler: the
	// wiring wakes it.
	Unplaced func()
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Outbox publishes committed jobs and commits the submits of type S in groups (see Enqueue).
// It is safe for concurrent use.
type Outbox[S any] struct {
	store    Store
	streams  Streams
	streamOf func(string) (string, bool)
	// scheduled: see Options.Scheduled.
	scheduled bool
	unplaced  func()
	log       *slog.Logger
	group     group[S]
	marks     markQueue
	// answered is read-held by every publish that follows its submitters' answers
	// (HoldAnswered); FlushMarks takes it to wait for them.
	answered sync.RWMutex
}

// New returns an Outbox whose group commit hands batches of submits to commit (see Enqueue).
func New[S any](opts Options, commit func(batch []S)) *Outbox[S] {
	o := &Outbox[S]{
		store:     opts.Store,
		streams:   opts.Streams,
		streamOf:  opts.StreamOf,
		scheduled: opts.Scheduled,
		unplaced:  opts.Unplaced,
		log:       logging.Component(opts.Logger, "outbox"),
	}
	o.group.commit = commit
	return o
}

// Mark says whether and how a publish marks its jobs enqueued.
type Mark struct {
	// Skip publishes without touching the jobs' outbox flag: for jobs that are claimed or
	// running, whose row may move on (fail, go back to pending with backoff) before a mark
	// could land, and a mark would then hide that retry from the Dispatcher.
	Skip bool
	// Fence makes the marks a leader-only write (nil: none). The XADD itself cannot be
	// fenced; a stale leader's extra entry is a harmless duplicate, but its mark must not land.
	Fence store.Fence
}

// Publish XADDs one entry per job (one pipeline) and, unless m.Skip, marks the jobs enqueued
// for their current attempt count. It returns how many jobs it published.
func (o *Outbox[S]) Publish(ctx context.Context, jobs []store.Job, m Mark) (int, error) {
	marks, err := o.xadd(ctx, jobs, nil)
	if err != nil || m.Skip {
		return len(marks), err
	}
	if m.Fence == nil {
		_, err = o.store.JobMarkEnqueued(ctx, marks) // one statement: no transaction of its own
	} else {
		err = store.WithFence(ctx, o.store, m.Fence, func(tx store.Tx) error {
			_, err := tx.JobMarkEnqueued(ctx, marks)
			return err
		})
	}
	if err != nil {
		return len(marks), fmt.Errorf("mark %d jobs enqueued: %w", len(marks), err)
	}
	return len(marks), nil
}

// PublishSubmitted publishes jobs their submit has just committed and queues their enqueued
// marks (see markQueue). The entries come after the commit: a worker that reads one finds the
// job. A failed publish leaves the jobs unmarked, for the Dispatcher once PublishGrace has
// passed, and does not fail the submit. submitters are the submitters' contexts, in the order
// of jobs: their traces go with the entries.
func (o *Outbox[S]) PublishSubmitted(ctx context.Context, jobs []store.Job, submitters []context.Context) {
	o.marks.add(o, o.publishSubmitted(ctx, jobs, submitters))
}

// PublishInTx publishes new jobs from inside the transaction that inserts them and marks them
// enqueued with its COMMIT. The held INSERT goes out first (Tx.Flush): a worker that reads an
// entry before the commit claims with a locking read, which waits for the inserting
// transaction and then sees the job (MariaDB: the new row's lock; SQLite: the single writer).
// An entry whose transaction then rolls back, or whose orchestrator dies before the commit,
// names no job: the claim refuses it as not found and the worker drops it.
func (o *Outbox[S]) PublishInTx(ctx context.Context, tx store.Tx, jobs []store.Job, submitters []context.Context) error {
	if err := tx.Flush(ctx); err != nil {
		return err
	}
	marks := o.publishSubmitted(ctx, jobs, submitters)
	if len(marks) == 0 {
		return nil
	}
	// The rows are this transaction's own: the mark goes out with the COMMIT.
	return tx.JobMarkPublished(ctx, marks)
}

// HoldAnswered is held by a publish that follows its submitters' answers, from before the
// answers until the publish has queued its marks; the function returned lets go. FlushMarks
// waits for every such publish.
func (o *Outbox[S]) HoldAnswered() (release func()) {
	o.answered.RLock()
	return o.answered.RUnlock
}

// publishSubmitted XADDs submitted jobs, each entry carrying its submitter's trace, sets their
// Enqueued and StreamID, and returns their marks; none when the publish failed, which is
// logged and left to the Dispatcher. The publish has its own deadline: the submitters'
// contexts may end at any time.
func (o *Outbox[S]) publishSubmitted(ctx context.Context, jobs []store.Job, submitters []context.Context) []store.JobEnqueued {
	// One submitter: the publish span is part of its trace, and the entry carries that span.
	// Several: the span links to each, and each entry carries its own submitter's trace.
	base := ctx
	var (
		traces []string
		links  []trace.Link
	)
	if len(submitters) == 1 {
		base = submitters[0]
	} else {
		traces = make([]string, len(submitters))
		for i, sc := range submitters {
			traces[i] = tracing.TraceParent(sc)
			if l := trace.LinkFromContext(sc); l.SpanContext.IsValid() {
				links = append(links, l)
			}
		}
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(base), PublishTimeout)
	defer cancel()
	marks, err := o.xadd(pctx, jobs, traces, links...)
	if err != nil {
		o.log.Warn("publish of submitted jobs failed; the dispatcher will publish them", "jobs", len(jobs),
			"first_job_id", jobs[0].ID, "error", err)
		return nil
	}
	byID := make(map[string]string, len(marks))
	for _, m := range marks {
		byID[m.ID] = m.StreamID
	}
	for i := range jobs {
		if id, ok := byID[jobs[i].ID]; ok {
			jobs[i].Enqueued, jobs[i].StreamID = true, id
		}
	}
	return marks
}

// xadd XADDs one entry per job (one pipeline) and returns the enqueued marks of the published
// jobs. Each entry carries traces[i] as its trace parent (nil traces, or an empty one: that of
// the publish span); the span links to links.
func (o *Outbox[S]) xadd(ctx context.Context, jobs []store.Job, traces []string, links ...trace.Link) (_ []store.JobEnqueued, err error) {
	ctx, span := tracing.Start(ctx, "engine.publish", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.Int("jobs", len(jobs))), trace.WithLinks(links...))
	defer func() { tracing.End(span, err) }()
	traceParent := tracing.TraceParent(ctx) // the entries carry the trace to the workers
	msgs := make([]streams.Message, 0, len(jobs))
	unplaced := false
	for i, j := range jobs {
		stream, ok := o.streamOf(j.Type)
		if !ok {
			o.log.Error("job of an unconfigured type cannot be published", "job_id", j.ID, "type", j.Type)
			continue
		}
		if o.scheduled && j.Scheduled() && j.Status == store.JobPending {
			if j.PlacedNode == "" {
				unplaced = true
				continue // the scheduler's to place, and then to publish
			}
			stream = streams.NodeStream(stream, j.PlacedNode)
		}
		tp := traceParent
		if i < len(traces) && traces[i] != "" {
			tp = traces[i]
		}
		msgs = append(msgs, streams.Message{Stream: stream, JobID: j.ID, Type: j.Type, Attempt: j.Attempts, TraceParent: tp,
			Priority: j.Priority})
	}
	if unplaced && o.unplaced != nil {
		o.unplaced()
	}
	ids, err := o.streams.Publish(ctx, msgs)
	if err != nil {
		return nil, err
	}
	marks := make([]store.JobEnqueued, len(msgs))
	for i, m := range msgs {
		marks[i] = store.JobEnqueued{ID: m.JobID, Attempts: m.Attempt, StreamID: ids[i]}
	}
	return marks, nil
}
