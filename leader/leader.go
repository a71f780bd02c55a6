// Package leader elects the one orchestrator instance that runs the leader-only work
// (maintenance loops, the dispatcher) and numbers every election with a term, so that a
// deposed leader's late writes are refused: two instances that both believe they lead (one
// paused past its lock, say) never both change the cluster.
//
// Two electors implement Elector: MySQLElector for clusters (a MariaDB GET_LOCK held on a
// pinned connection) and LocalElector for the embedded single-node mode (a file lock on the
// data directory). Both increment the term through the store on every acquisition and run
// Config.OnElected with a context that ends the instant leadership is lost.
//
// A lock alone does not make leader-only writes safe: a leader can freeze (GC pause, SIGSTOP,
// partition) past the moment the server drops its lock, then wake up and write. So every
// leader-only write runs through RunFenced with the term OnElected received, and is refused
// with store.ErrFenced once a newer term exists.
package leader

import (
	"context"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// Audit event types of leadership transitions (orchestrator_audit.event_type).
const (
	// EventElected: this instance acquired a term; details {"term": N}.
	EventElected = "leader.elected"
	// EventLost: leadership ended without being asked to (lock lost, term moved on);
	// details {"term": N, "reason": "..."}.
	EventLost = "leader.lost"
	// EventResigned: the leader was stopped and gave leadership up; details {"term": N}.
	EventResigned = "leader.resigned"
)

// Elector elects a leader among orchestrator instances and runs the leader-only work.
type Elector interface {
	// Start campaigns in the background until Stop or until ctx ends; it returns at once (a
	// LocalElector returns an error when the data directory is taken).
	Start(ctx context.Context) error
	// Stop ends the campaign. A leader resigns: its leader context is cancelled, the lock is
	// released so that a follower takes over within about one interval, and Stop returns
	// once OnElected has returned. Idempotent and safe before Start.
	Stop()
	// IsLeader reports whether this instance leads now (for metrics and /status). Leader-only
	// writes must not rely on it: they are fenced by their term instead.
	IsLeader() bool
	// Term returns the term this instance leads in, 0 when it does not lead.
	Term() int64
	// Leader returns the recorded state of the latest election (for /status), whichever
	// instance won it.
	Leader(ctx context.Context) (store.LeaderState, error)
}

var (
	_ Elector = (*MySQLElector)(nil)
	_ Elector = (*LocalElector)(nil)
)

// RunFenced runs fn in one transaction that first checks that term is still the current
// leadership term (store.LeaderExecutor.LeaderCheckTerm). When it is not, fn does not run
// and the error wraps store.ErrFenced: the caller has been deposed and must stop leader-only
// work. While fn runs, no new term can be acquired, so whatever fn writes commits under term.
func RunFenced(ctx context.Context, st store.Store, term int64, fn func(tx store.Tx) error) error {
	return st.WithTx(ctx, func(tx store.Tx) error {
		if err := tx.LeaderCheckTerm(ctx, term); err != nil {
			return err // already says which term was checked against which
		}
		return fn(tx)
	})
}

// Durations derived from Config.Interval.
const (
	// jitterFrac spreads election steps: Interval ± 10%.
	jitterFrac = 0.1
	// cooldownIntervals is how long, in intervals, an instance that just lost leadership waits
	// before campaigning again: its peers poll every interval, so one of them, which has not
	// just failed, gets the first chance at the lock.
	cooldownIntervals = 2
	// backoffMaxShift caps the backoff of failing steps at Interval << 3 (8 intervals).
	backoffMaxShift = 3
	// checkTimeoutMin is the least time a leader's check is given before the leader treats it
	// as failed, so that a short Interval does not turn a slow round trip into a step-down.
	checkTimeoutMin = time.Second
	// releaseTimeout bounds the clean-up statements of a resignation.
	releaseTimeout = 2 * time.Second
)
