package engine

import (
	"context"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// The enqueued marks of submitted jobs. A submit of fewer than publishInTxMin jobs commits
// them, publishes them, and queues their marks here; the marks are written a moment later,
// many in one UPDATE, so that the submit is one round trip to MariaDB rather than two
// (docs/performance.md). Most of the jobs are claimed by then and their marks match nothing.
// A mark that never lands (a crash, a failed write) costs a duplicate entry: the dispatcher
// publishes the job again once PublishGrace has passed, and the claim of a job that has moved
// on is refused.
const (
	// markDelay is how long a mark waits for others to share its UPDATE.
	markDelay = 100 * time.Millisecond
	// markTimeout bounds one write of marks.
	markTimeout = 10 * time.Second
	// PublishGrace is how long the dispatcher leaves a job that was never attempted to its
	// submit, which publishes it after the commit and marks it after markDelay. It must cover
	// publishTimeout, markDelay and a write of marks; past it, a job its submit could not
	// publish (Redis down, the orchestrator gone between the commit and the XADD) is the
	// dispatcher's.
	PublishGrace = 5 * time.Second
)

// markQueue holds the marks waiting to be written. It has no goroutine of its own: the first
// mark queued starts a writer, which ends when it finds the queue empty.
type markQueue struct {
	mu      sync.Mutex
	marks   []store.JobEnqueued
	writing bool
}

// add queues marks and starts a writer when none is at work.
func (q *markQueue) add(e *Engine, marks []store.JobEnqueued) {
	if len(marks) == 0 {
		return
	}
	q.mu.Lock()
	q.marks = append(q.marks, marks...)
	start := !q.writing
	q.writing = true
	q.mu.Unlock()
	if start {
		go q.write(e)
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

// write writes the queued marks every markDelay until the queue is empty.
func (q *markQueue) write(e *Engine) {
	for {
		time.Sleep(markDelay)
		marks := q.take(true)
		if len(marks) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
		e.writeMarks(ctx, marks)
		cancel()
	}
}

// writeMarks writes marks; a failure is logged, not retried (see the top of this file).
func (e *Engine) writeMarks(ctx context.Context, marks []store.JobEnqueued) {
	if _, err := e.store.JobMarkEnqueued(ctx, marks); err != nil {
		e.log.Warn("marking published jobs enqueued failed; the dispatcher will publish them again",
			"jobs", len(marks), "first_job_id", marks[0].ID, "error", err)
	}
}

// FlushMarks writes the queued enqueued marks now: at shutdown, once no submit is in flight,
// and in tests. It first waits for the publishes of the submits already answered, which queue
// their marks when their XADDs return (at most publishTimeout).
func (e *Engine) FlushMarks(ctx context.Context) {
	// The write lock is ours once every such publish has let go of its read lock: the empty
	// critical section is the point, a barrier behind them.
	e.answered.Lock()
	e.answered.Unlock() //nolint:staticcheck // SA2001: a barrier, see above
	if marks := e.marks.take(false); len(marks) > 0 {
		e.writeMarks(ctx, marks)
	}
}
