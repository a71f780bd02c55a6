package reclaimer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/streams"
)

// TrimmerConfig configures a Trimmer.
type TrimmerConfig struct {
	// Streams are the job streams to trim (stream names; every configured type's).
	Streams []string
	// DeadLetterRetention is the age past which DLQ entries are trimmed (default
	// config.DeadLetterRetentionDefault), the same as the dead letters' rows.
	DeadLetterRetention time.Duration
	// Interval between passes, ± 10% (default config.TrimIntervalDefault).
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Metrics (default: private, unregistered ones).
	Metrics *Metrics
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
}

// TrimmerConfigFrom fills the settings of c that come from the application configuration.
func TrimmerConfigFrom(app *config.Config, c TrimmerConfig) TrimmerConfig {
	for _, name := range app.TypeNames() {
		c.Streams = append(c.Streams, app.JobTypes[name].Stream)
	}
	c.DeadLetterRetention = cmp.Or(c.DeadLetterRetention, app.DeadLetterRetention)
	c.Interval = cmp.Or(c.Interval, app.TrimInterval)
	return c
}

// TrimResult counts what one pass deleted, by stream name.
type TrimResult map[string]int64

// Trimmer is the leader loop that keeps the streams bounded: each job stream is trimmed below
// the oldest entry that some consumer group has pending or not yet read (XTRIM MINID computed
// and applied atomically, streams.Client.TrimUnneeded), so an entry nobody has read is never
// dropped; the DLQ stream, which no group reads, is trimmed by age. It writes nothing to the
// database and therefore needs no fence.
type Trimmer struct {
	startstop.Base
	sc  *streams.Client
	cfg TrimmerConfig
	log *slog.Logger
}

// NewTrimmer returns a Trimmer.
func NewTrimmer(sc *streams.Client, cfg TrimmerConfig) *Trimmer {
	cfg.DeadLetterRetention = cmp.Or(cfg.DeadLetterRetention, config.DeadLetterRetentionDefault)
	cfg.Interval = cmp.Or(cfg.Interval, config.TrimIntervalDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	return &Trimmer{sc: sc, cfg: cfg, log: logging.Component(cfg.Logger, "trimmer")}
}

// Start runs the trimmer until ctx ends or Stop is called. It returns at once.
func (t *Trimmer) Start(ctx context.Context) error {
	return t.StartLoop(ctx, t.cfg.Metrics.loop("trimmer", t.cfg.Interval, t.cfg.Stagger, t.log), startstop.Pass(t.runOnce))
}

// runOnce trims every stream once; a failing stream does not stop the others.
func (t *Trimmer) runOnce(ctx context.Context) (TrimResult, error) {
	res := TrimResult{}
	nodes, err := t.sc.NodeStreams(ctx)
	errs := []error{err}
	for _, s := range slices.Concat(t.cfg.Streams, nodes) {
		r, err := t.sc.TrimUnneeded(ctx, s, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res[s] = r.Removed
	}
	n, err := t.sc.TrimBefore(ctx, streams.DLQStream, t.cfg.Now().Add(-t.cfg.DeadLetterRetention))
	if err != nil {
		errs = append(errs, err)
	} else {
		res[streams.DLQStream] = n
	}
	total := int64(0)
	for _, n := range res {
		total += n
	}
	if total > 0 {
		t.cfg.Metrics.trimmed.Add(float64(total))
		t.log.Debug("trimmed streams", "removed", map[string]int64(res))
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("trim streams: %w", err)
	}
	return res, nil
}
