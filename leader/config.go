package leader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
)

// Config defaults.
const (
	// LockNameDefault is the GET_LOCK name shared by the instances of one cluster.
	LockNameDefault = "gpu_orchestrator_leader"
	// IntervalDefault is the pace of election steps; a follower takes over about this long
	// after a leader resigns.
	IntervalDefault = time.Second
	// WaitTimeoutDefault is the leader connection's wait_timeout: a leader that stopped
	// checking loses the lock this long after its last check.
	WaitTimeoutDefault = 10 * time.Second
)

// Limits of Config values.
const (
	// LockNameMax is MySQL's limit on lock names (MariaDB is laxer).
	LockNameMax = 64
	// IDMax keeps "leader:<id>" within orchestrator_audit.actor (160) and the id within
	// leader_state.leader_id (190).
	IDMax = 150
	// WaitTimeoutMinChecks is how many check timeouts (Interval, at least a second) WaitTimeout
	// must span, so that a live leader's connection is never idle long enough to be dropped.
	WaitTimeoutMinChecks = 3
)

// Config configures an elector. Zero values take the defaults.
type Config struct {
	// LockName is the MariaDB GET_LOCK name (default LockNameDefault). Lock names are
	// server-wide: two clusters sharing one server need different names. LocalElector ignores it.
	LockName string
	// ID identifies this instance in leader_state, the audit and the logs (default
	// hostname-pid).
	ID string
	// Interval paces the election: followers try to take the lock, the leader checks that it
	// still holds it and renews leader_state.renewed_at (default IntervalDefault, ± 10% jitter).
	Interval time.Duration
	// WaitTimeout is set (in whole seconds) as wait_timeout on the leader's pinned connection,
	// so that the server drops the connection, and with it the lock, of a leader that stopped
	// checking: a frozen process or a partition (default WaitTimeoutDefault). It must be at
	// least WaitTimeoutMinChecks times max(Interval, 1s). LocalElector ignores it.
	WaitTimeout time.Duration
	// OnElected runs the leader-only work; it may be nil. It is called in its own goroutine
	// with the term and a context that is cancelled the instant leadership is lost or Stop is
	// called; it must return soon after. The elector waits for it to return before
	// campaigning again (and Stop waits too), so two generations of leader-only work never
	// overlap within one instance. Writes it makes must be fenced with RunFenced(term).
	OnElected func(ctx context.Context, term int64)
	// Stagger delays the first election step randomly by up to one Interval, so that a fleet
	// started at once does not stampede the database (off in tests).
	Stagger bool
	// Logger (default slog.Default()); the elector adds component=leader and leader_id.
	Logger *slog.Logger
	// Clock gives the times written to leader_state and the audit (default time.Now). Timers
	// always use the real time.
	Clock func() time.Time
}

// withDefaults fills the zero fields and validates the result.
func (c Config) withDefaults() (Config, error) {
	c.LockName = cmp.Or(c.LockName, LockNameDefault)
	c.ID = cmp.Or(c.ID, defaultID())
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.WaitTimeout = cmp.Or(c.WaitTimeout, WaitTimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	var errs []error
	if len(c.LockName) > LockNameMax {
		errs = append(errs, fmt.Errorf("lock name %q is longer than %d bytes", c.LockName, LockNameMax))
	}
	if len(c.ID) > IDMax {
		errs = append(errs, fmt.Errorf("id %q is longer than %d bytes", c.ID, IDMax))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval %s is negative", c.Interval))
	}
	if c.WaitTimeout < 0 || c.WaitTimeout%time.Second != 0 {
		errs = append(errs, fmt.Errorf("wait timeout %s is not a positive number of seconds", c.WaitTimeout))
	} else if minWait := WaitTimeoutMinChecks * c.checkTimeout(); c.WaitTimeout < minWait {
		errs = append(errs, fmt.Errorf("wait timeout %s is shorter than %d checks of %s (interval %s)",
			c.WaitTimeout, WaitTimeoutMinChecks, c.checkTimeout(), c.Interval))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("invalid leader config: %w", err)
	}
	return c, nil
}

// checkTimeout bounds one check of a leader (the lock query, the touch): a check that takes
// longer counts as failed.
func (c Config) checkTimeout() time.Duration {
	return max(c.Interval, checkTimeoutMin)
}

// defaultID is hostname-pid: unique among live instances, readable in /status.
func defaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "orchestrator"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}
