package leader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
)

// errTermMovedOn is the step-down reason when the store reports a newer term than ours.
var errTermMovedOn = errors.New("a newer leadership term was acquired")

// core is what both electors share: the published term, the leader-only work, and the
// recording of every transition (log and audit).
type core struct {
	st  store.Store
	cfg Config
	log *slog.Logger

	// term is the term this instance leads in, 0 when it does not lead (terms start at 1).
	// One atomic, so that IsLeader and Term never disagree.
	term atomic.Int64

	// Owned by the run goroutine.
	leading  *leadership // nil while following
	failures int         // consecutive failed steps, for the backoff
}

// leadership is one term of this instance: the cancel of its leader context and a channel
// closed when OnElected has returned.
type leadership struct {
	term   int64
	cancel context.CancelFunc
	done   chan struct{}
}

func newCore(st store.Store, cfg Config) core {
	return core{st: st, cfg: cfg, log: cfg.Logger.With("component", "leader", "leader_id", cfg.ID)}
}

// IsLeader reports whether this instance leads now.
func (c *core) IsLeader() bool { return c.term.Load() != 0 }

// Term returns the term this instance leads in, 0 when it does not lead.
func (c *core) Term() int64 { return c.term.Load() }

// Leader returns the recorded state of the latest election.
func (c *core) Leader(ctx context.Context) (store.LeaderState, error) {
	ls, err := c.st.LeaderGet(ctx)
	if err != nil {
		return store.LeaderState{}, fmt.Errorf("read leader state: %w", err)
	}
	return ls, nil
}

// acquire increments the term and writes the leader.elected audit row in one transaction,
// so that the audit never misses an election nor records one that did not happen.
func (c *core) acquire(ctx context.Context) (int64, error) {
	var term int64
	err := c.st.WithTx(ctx, func(tx store.Tx) error {
		now := c.cfg.Clock()
		t, err := tx.LeaderAcquire(ctx, c.cfg.ID, now)
		if err != nil {
			return err
		}
		term = t
		return tx.AuditInsert(ctx, []store.AuditEvent{c.event(EventElected, term, now, nil)})
	})
	if err != nil {
		return 0, fmt.Errorf("acquire leadership term: %w", err)
	}
	return term, nil
}

// lead makes this instance the leader of term: it publishes the term and starts OnElected
// under a leader context derived from ctx (the elector's run context).
func (c *core) lead(ctx context.Context, term int64) {
	lctx, cancel := context.WithCancel(ctx)
	l := &leadership{term: term, cancel: cancel, done: make(chan struct{})}
	c.leading = l
	c.term.Store(term)
	c.log.Info("elected leader", "term", term)
	go func() {
		defer close(l.done)
		if c.cfg.OnElected != nil {
			c.cfg.OnElected(lctx, term)
		}
	}()
}

// lose is the first, immediate half of stepping down: stop claiming leadership and cancel
// the leader context. The caller then releases its lock and calls settle.
func (c *core) lose() *leadership {
	l := c.leading
	c.leading = nil
	c.term.Store(0)
	l.cancel()
	return l
}

// settle is the second half of stepping down: log and audit the transition, then wait for
// OnElected to return. reason is nil for a resignation.
func (c *core) settle(l *leadership, event string, reason error) {
	if reason != nil {
		c.log.Warn("lost leadership", "term", l.term, "reason", reason.Error())
	} else {
		c.log.Info("resigned leadership", "term", l.term)
	}
	// The run context may be gone (Stop): the audit row is written regardless, bounded.
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := c.st.AuditInsert(ctx, []store.AuditEvent{c.event(event, l.term, c.cfg.Clock(), reason)}); err != nil {
		c.log.Warn("record leadership transition failed", "term", l.term, "event", event, "error", err)
	}
	// OnElected is expected to return soon after its context ends; say so when it does not.
	slow := time.NewTimer(c.cfg.checkTimeout())
	defer slow.Stop()
	select {
	case <-l.done:
	case <-slow.C:
		c.log.Warn("waiting for leader-only work to stop", "term", l.term)
		<-l.done
	}
}

// touch renews leader_state.renewed_at. It returns an error wrapping errTermMovedOn (and
// store.ErrFenced) when another instance acquired a newer term: the caller must step down.
// Other failures are logged and ignored: the lock, not the touch, decides leadership.
func (c *core) touch(ctx context.Context, term int64) error {
	tctx, cancel := context.WithTimeout(ctx, c.cfg.checkTimeout())
	defer cancel()
	err := c.st.LeaderTouch(tctx, term, c.cfg.Clock())
	switch {
	case errors.Is(err, store.ErrFenced):
		return fmt.Errorf("%w: %w", errTermMovedOn, err)
	case err != nil && ctx.Err() == nil: // not merely stopping
		c.log.Warn("renew leader state failed", "term", term, "error", err)
	}
	return nil
}

func (c *core) event(eventType string, term int64, now time.Time, reason error) store.AuditEvent {
	details := map[string]any{"term": term}
	if reason != nil {
		details["reason"] = reason.Error()
	}
	raw, _ := json.Marshal(details) // a map of a number and a string always marshals
	return store.AuditEvent{TS: now, EventType: eventType, Actor: "leader:" + c.cfg.ID, Details: raw}
}

// loop calls step until ctx ends; step returns the delay to the next step. Errors other than
// the context's own are logged, and failing steps back off exponentially (with jitter).
func (c *core) loop(ctx context.Context, step func(ctx context.Context) (time.Duration, error)) {
	var first time.Duration
	if c.cfg.Stagger {
		first = rand.N(c.cfg.Interval + 1)
	}
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, err := step(ctx)
		switch {
		case err == nil:
			c.failures = 0
		case ctx.Err() != nil:
			return
		default:
			c.failures++
			next = c.interval(1 << min(c.failures, backoffMaxShift))
			c.log.Warn("election step failed", "error", err, "attempt", c.failures, "retry_in", next)
		}
		t.Reset(next)
	}
}

// interval returns n intervals, ± jitter.
func (c *core) interval(n int) time.Duration {
	return startstop.Jitter(time.Duration(n)*c.cfg.Interval, jitterFrac)
}
