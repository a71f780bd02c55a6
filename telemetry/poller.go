package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/internal/startstop"
)

// Poller defaults.
const (
	// PollerIntervalDefault is the time between two polls.
	PollerIntervalDefault = 5 * time.Second
	// PollerJitterDefault is the fraction by which each interval is randomly stretched or shrunk.
	PollerJitterDefault = 0.1
)

// Sink receives every snapshot the Poller takes: the orchestrator writes it to the gpu_devices
// table, a worker sends it with its heartbeat. The snapshot is shared with Latest: read it, do
// not modify it.
type Sink func(ctx context.Context, snap Snapshot) error

// PollerConfig configures a Poller.
type PollerConfig struct {
	// Interval is the time between polls (default PollerIntervalDefault), ± Jitter.
	Interval time.Duration
	// Jitter is the fraction [0, 1) of random jitter on Interval (0: PollerJitterDefault).
	Jitter float64
	// Timeout bounds one pass, the provider's read and the sink together (default: Interval).
	Timeout time.Duration
	// Stagger delays the first poll randomly by up to one Interval. Off by default: a process
	// wants its first snapshot at once (a worker's first heartbeat carries it); turn it on where
	// many processes start together and the sink writes to a shared database.
	Stagger bool
	// Sink receives each snapshot; nil keeps snapshots only for Latest.
	Sink Sink
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Poller reads a Provider every interval, keeps the latest snapshot for Latest and hands each
// one to the Sink. A failed read or sink is logged and the loop goes on; a failed read keeps the
// previous snapshot (its Taken time tells how stale it is).
type Poller struct {
	startstop.Base
	provider Provider
	cfg      PollerConfig
	log      *slog.Logger
	wake     chan struct{}

	mu     sync.RWMutex
	latest Snapshot
	has    bool
}

// NewPoller returns a Poller over provider. It fails on a nil provider or an invalid setting.
func NewPoller(provider Provider, cfg PollerConfig) (*Poller, error) {
	if provider == nil {
		return nil, errors.New("new telemetry poller: provider is nil")
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("new telemetry poller: interval %s must not be negative", cfg.Interval)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("new telemetry poller: timeout %s must not be negative", cfg.Timeout)
	}
	if cfg.Jitter < 0 || cfg.Jitter >= 1 {
		return nil, fmt.Errorf("new telemetry poller: jitter %v must be in [0, 1)", cfg.Jitter)
	}
	cfg.Interval = cmp.Or(cfg.Interval, PollerIntervalDefault)
	cfg.Jitter = cmp.Or(cfg.Jitter, PollerJitterDefault)
	cfg.Timeout = cmp.Or(cfg.Timeout, cfg.Interval)
	return &Poller{
		provider: provider,
		cfg:      cfg,
		log:      cmp.Or(cfg.Logger, slog.Default()).With("component", "telemetry_poller", "provider", provider.Name()),
		wake:     make(chan struct{}, 1),
	}, nil
}

// Start polls until ctx ends or Stop is called. It returns at once; starting a running Poller
// does nothing.
func (p *Poller) Start(ctx context.Context) error {
	return p.StartLoop(ctx, startstop.LoopParams{
		Interval: p.cfg.Interval, Jitter: p.cfg.Jitter, Stagger: p.cfg.Stagger, Wake: p.wake, Logger: p.log,
	}, startstop.Pass(p.runOnce))
}

// Wake asks for a poll soon, e.g. right after a lease was granted or released.
func (p *Poller) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Latest returns the most recent snapshot, and false when none has been taken yet.
func (p *Poller) Latest() (Snapshot, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.latest, p.has
}

// runOnce takes one snapshot, stores it for Latest and hands it to the sink.
func (p *Poller) runOnce(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	snap, err := p.provider.Snapshot(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read gpu telemetry: %w", err)
	}
	p.mu.Lock()
	p.latest, p.has = snap, true
	p.mu.Unlock()
	p.log.Debug("gpu telemetry read", "node_id", snap.NodeID, "gpus", len(snap.GPUs), "lost", len(snap.Lost))
	if p.cfg.Sink != nil {
		if err := p.cfg.Sink(ctx, snap); err != nil {
			return snap, fmt.Errorf("sink gpu telemetry: %w", err)
		}
	}
	return snap, nil
}
