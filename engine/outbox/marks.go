package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// The enqueued marks of submitted jobs. A submit whose jobs are published after the commit
// (PublishSubmitted) queues their marks here; the marks are written a moment later, many in one
// UPDATE, so that the submit is one round trip to MariaDB rather than two. Most of the jobs
// are claimed by then and their marks match nothing. A mark that never lands (a crash, a
// failed write) costs a duplicate entry: the Dispatcher publishes the job again once
// PublishGrace has passed, and the claim of a job that has moved on is refused.
const (
	// MarkDelay is how long a mark waits for others to share its UPDATE.
	MarkDelay = 100 * time.Millisecond
	// markTimeout bounds one write of marks.
	markTimeout = 10 * time.Second
	// PublishGrace is how long the Dispatcher leaves a job that was never attempted to its
	// submit, which publishes it after the commit and marks it after MarkDelay. It must cover
	// PublishTimeout, MarkDelay and a write of marks; past it, a job its submit could not
	// publish (Redis down, the orchestrator gone between the commit and the XADD) is the
	// Dispatcher's.
	PublishGrace = 5 * time.Second
)

// markQueue holds the marks waiting to be written. It has no goroutine of its own: the first
// mark queued starts a writer, which ends when it finds the queue empty.
type markQueue struct {
	mu      sync.Mutex
	marks   []store.JobEnqueued
	writing bool
}

// marker writes marks (the Outbox).
type marker interface {
	writeMarks(ctx context.Context, marks []store.JobEnqueued)
}

// add queues marks and starts a writer when none is at work.
func (q *markQueue) add(w marker, marks []store.JobEnqueued) {
	if len(marks) == 0 {
		return
	}
	q.mu.Lock()
	q.marks = append(q.marks, marks...)
	start := !q.writing
	q.writing = true
	q.mu.Unlock()
	if start {
		go q.write(w)
	}
}

// take empties the queue; nil (and the writer ends) when it was empty.
func (q *markQueue) take(ending bool) []store.JobEnqueued {
	q.mu.Lock()
	defer q.mu.Unlock()
	marks := q.marks
	q.marks = nil
	if len(marks) == 0 && ending {
		q.writing = false
	}
	return marks
}

// write writes the queued marks every MarkDelay until the queue is empty.
func (q *markQueue) write(w marker) {
	for {
		time.Sleep(MarkDelay)
		marks := q.take(true)
		if len(marks) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
		w.writeMarks(ctx, marks)
		cancel()
	}
}

// writeMarks writes marks; a failure is logged, not retried (see the top of this file).
func (o *Outbox[S]) writeMarks(ctx context.Context, marks []store.JobEnqueued) {
	if _, err := o.store.JobMarkEnqueued(ctx, marks); err != nil {
		o.log.Warn("marking published jobs enqueued failed; the dispatcher will publish them again",
			"jobs", len(marks), "first_job_id", marks[0].ID, "error", err)
	}
}

// FlushMarks writes the queued enqueued marks now: at shutdown, once no submit is in flight,
// and in tests. It first waits for the publishes of the submits already answered, which queue
// their marks when their XADDs return (at most PublishTimeout).
func (o *Outbox[S]) FlushMarks(ctx context.Context) {
	// The write lock is ours once every such publish has let go of its read lock: the empty
	// critical section is the point, a barrier behind them.
	o.answered.Lock()
	o.answered.Unlock() //nolint:staticcheck // SA2001: a barrier, see above
	if marks := o.marks.take(false); len(marks) > 0 {
		o.writeMarks(ctx, marks)
	}
}
