// Package reclaimer runs the leader's stream maintenance: the Reclaimer settles entries that
// stayed unacknowledged past the claim idle time (XAUTOCLAIM over every consumer group) and
// repairs Redis after a data loss; the Trimmer keeps the streams short without ever dropping an
// entry that some group still needs. Job state decisions are the engine's (engine.Decide).
package reclaimer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/streams"
)

// Defaults of Config.
const (
	// ConsumerDefault is the consumer that XAUTOCLAIM transfers idle entries to. A worker that
	// is still alive takes its entry back with its next touch (XCLAIM to itself).
	ConsumerDefault = "orchestrator-reclaimer"
	// MaxCallsDefault bounds the XAUTOCLAIM calls per group and pass, so that one huge pending
	// list cannot starve the other groups; the scan resumes where it stopped on the next pass.
	MaxCallsDefault = 100
)

// rescueReason is what a rescue by the reclaimer records as the failed attempt's error.
const rescueReason = "worker lost: stream entry idle past claim_idle and lease expired"

// Engine is what the reclaimer needs of the engine; *engine.Engine implements it.
type Engine interface {
	// Settle decides idle entries against their job rows (and republishes or requeues).
	Settle(ctx context.Context, p engine.SettleParams) ([]engine.Settlement, error)
	// Rescue records a failed attempt of a job whose lease expired (retry or dead letter);
	// it returns engine.OutcomeStale when the job is no longer claimed or running.
	Rescue(ctx context.Context, jobID, reason string) (outcome string, err error)
	// RecoverRedis detects a Redis data loss and re-creates groups and entries.
	RecoverRedis(ctx context.Context, fence engine.Fence) (engine.RecoveryResult, error)
}

var _ Engine = (*engine.Engine)(nil)

// Group is one consumer group of one stream: one to reclaim from, or whose backlog
// QueueCollector reads.
type Group = streams.GroupRef

// GroupsOf returns the consumer group of every configured job type.
func GroupsOf(c *config.Config) []Group {
	var out []Group
	for _, name := range c.TypeNames() {
		out = append(out, Group{Stream: c.JobTypes[name].Stream, Group: streams.GroupName(name)})
	}
	return out
}

// Config configures a Reclaimer.
type Config struct {
	// Groups are the consumer groups to reclaim from (GroupsOf).
	Groups []Group
	// ClaimIdle is the min-idle of XAUTOCLAIM (default config.ClaimIdleDefault).
	ClaimIdle time.Duration
	// Interval between passes, ± 10% (default config.ReclaimIntervalDefault).
	Interval time.Duration
	// Batch is the COUNT of one XAUTOCLAIM (default config.ReclaimBatchDefault).
	Batch int
	// MaxCalls bounds XAUTOCLAIM calls per group and pass (default MaxCallsDefault).
	MaxCalls int
	// Consumer receives the claimed entries (default ConsumerDefault).
	Consumer string
	// Fence guards the leader's writes (nil: none).
	Fence engine.Fence
	// Metrics (default: private, unregistered ones).
	Metrics *Metrics
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
}

// ConfigFrom fills the settings of c that come from the application configuration.
func ConfigFrom(app *config.Config, c Config) Config {
	c.Groups = GroupsOf(app)
	c.ClaimIdle = cmp.Or(c.ClaimIdle, app.ClaimIdle)
	c.Interval = cmp.Or(c.Interval, app.ReclaimInterval)
	c.Batch = cmp.Or(c.Batch, app.ReclaimBatch)
	return c
}

// Result counts what one pass did.
type Result struct {
	Recovery engine.RecoveryResult
	// Outcomes counts entries by outcome label (see Outcomes).
	Outcomes map[string]int
}

// Reclaimer is the leader loop that settles stream entries nobody acknowledged in time: each
// pass first checks Redis for a data loss (engine.RecoverRedis), then walks the pending list of
// every group with XAUTOCLAIM and settles each idle entry against its job row: terminal or
// missing → ack; pending → republish (or requeue) and ack; claimed or running with a live
// lease → leave; lease expired → rescue and ack. Entries XAUTOCLAIM reports deleted are acked.
type Reclaimer struct {
	startstop.Base
	eng     Engine
	sc      *streams.Client
	cfg     Config
	log     *slog.Logger
	cursors map[Group]string // where each group's scan resumes; only runOnce touches it
}

// New returns a Reclaimer. It panics on a configuration that names no group.
func New(eng Engine, sc *streams.Client, cfg Config) *Reclaimer {
	if len(cfg.Groups) == 0 {
		panic("reclaimer: no consumer group to reclaim from")
	}
	cfg.ClaimIdle = cmp.Or(cfg.ClaimIdle, config.ClaimIdleDefault)
	cfg.Interval = cmp.Or(cfg.Interval, config.ReclaimIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, config.ReclaimBatchDefault)
	cfg.MaxCalls = cmp.Or(cfg.MaxCalls, MaxCallsDefault)
	cfg.Consumer = cmp.Or(cfg.Consumer, ConsumerDefault)
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	cfg.Metrics.initStreams(cfg.Groups)
	return &Reclaimer{
		eng: eng, sc: sc, cfg: cfg,
		log:     logging.Component(cfg.Logger, "reclaimer"),
		cursors: map[Group]string{},
	}
}

// Start runs the reclaimer until ctx ends or Stop is called. It returns at once.
func (r *Reclaimer) Start(ctx context.Context) error {
	return r.StartLoop(ctx, r.cfg.Metrics.loop("reclaimer", r.cfg.Interval, r.cfg.Stagger, r.log), startstop.Pass(r.runOnce))
}

// runOnce recovers Redis when needed, then reclaims from every group. A failing group does not
// stop the others; the errors are joined.
func (r *Reclaimer) runOnce(ctx context.Context) (Result, error) {
	res := Result{Outcomes: map[string]int{}}
	rec, err := r.eng.RecoverRedis(ctx, r.cfg.Fence)
	res.Recovery = rec
	if rec.Reason != "" {
		r.cfg.Metrics.recoveries.WithLabelValues(rec.Reason).Inc()
	}
	if err != nil {
		return res, fmt.Errorf("reclaim: %w", err)
	}
	groups, err := r.groups(ctx)
	errs := []error{err}
	for _, g := range groups {
		before := maps.Clone(res.Outcomes)
		if err := r.reclaimGroup(ctx, g, &res); err != nil {
			errs = append(errs, err)
		}
		base, _, _ := streams.SplitNodeStream(g.Stream) // a node stream counts as its type's
		r.cfg.Metrics.addEntries(cmp.Or(base, g.Stream), before, res.Outcomes)
	}
	if len(res.Outcomes) > 0 {
		r.log.Debug("reclaimed idle entries", "outcomes", res.Outcomes)
	}
	return res, errors.Join(errs...)
}

// groups are the configured groups and, in the same group, the node streams of their types
// (streams.NodeStream) that the scheduler has published to.
func (r *Reclaimer) groups(ctx context.Context) ([]Group, error) {
	nodes, err := r.sc.NodeStreams(ctx)
	if err != nil {
		return r.cfg.Groups, fmt.Errorf("reclaim: %w", err)
	}
	return slices.Concat(r.cfg.Groups, NodeGroups(r.cfg.Groups, nodes)), nil
}

// NodeGroups returns the group of each node stream among nodes whose type's stream is one of
// groups'.
func NodeGroups(groups []Group, nodes []string) []Group {
	var out []Group
	for _, ns := range nodes {
		base, _, _ := streams.SplitNodeStream(ns)
		for _, g := range groups {
			if g.Stream == base {
				out = append(out, Group{Stream: ns, Group: g.Group})
			}
		}
	}
	return out
}

// reclaimGroup scans one group's pending list from where the last pass stopped.
func (r *Reclaimer) reclaimGroup(ctx context.Context, g Group, res *Result) error {
	start := r.cursors[g]
	defer func() { r.cursors[g] = start }()
	for range r.cfg.MaxCalls {
		ac, err := r.sc.AutoClaim(ctx, streams.AutoClaimParams{
			Stream: g.Stream, Group: g.Group, Consumer: r.cfg.Consumer,
			MinIdle: r.cfg.ClaimIdle, Start: start, Count: r.cfg.Batch,
		})
		if errors.Is(err, streams.ErrNoGroup) {
			start = "" // the next pass's recovery creates it
			return nil
		}
		if err != nil {
			return fmt.Errorf("reclaim %s/%s: %w", g.Stream, g.Group, err)
		}
		if len(ac.Deleted) > 0 {
			if err := r.sc.AckIDs(ctx, g.Stream, g.Group, ac.Deleted...); err != nil {
				return fmt.Errorf("reclaim %s/%s: %w", g.Stream, g.Group, err)
			}
			res.Outcomes[OutcomeDeleted] += len(ac.Deleted)
		}
		if err := r.settle(ctx, ac.Claimed, res); err != nil {
			return fmt.Errorf("reclaim %s/%s: %w", g.Stream, g.Group, err)
		}
		start = ac.Next
		if start == "0-0" || start == "" {
			start = ""
			return nil
		}
	}
	return nil
}

// settle hands a batch to the engine, rescues what must be rescued, and acks the rest.
func (r *Reclaimer) settle(ctx context.Context, ds []streams.Delivery, res *Result) error {
	if len(ds) == 0 {
		return nil
	}
	ss, err := r.eng.Settle(ctx, engine.SettleParams{Entries: ds, Fence: r.cfg.Fence})
	if err != nil {
		return err
	}
	var ack []streams.Delivery
	for _, s := range ss {
		switch {
		case s.Outcome.Acks():
			ack = append(ack, s.Entry)
			res.Outcomes[string(s.Outcome)]++
		case s.Outcome == engine.SettleRescue:
			outcome, err := r.eng.Rescue(ctx, s.Entry.JobID, rescueReason)
			if err != nil {
				r.log.Error("rescue failed; the entry stays pending", "job_id", s.Entry.JobID, "error", err)
				res.Outcomes[OutcomeRescueFailed]++
				continue
			}
			r.log.Info("rescued a job whose worker is gone", "job_id", s.Entry.JobID, "outcome", outcome)
			ack = append(ack, s.Entry)
			res.Outcomes[OutcomeRescued]++
		default:
			res.Outcomes[string(s.Outcome)]++
		}
	}
	return r.sc.Ack(ctx, ack)
}
