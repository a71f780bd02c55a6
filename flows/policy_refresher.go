package flows

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
)

// PolicyRefresherIntervalDefault is the time between two reads of the policies.
const PolicyRefresherIntervalDefault = config.ApprovalsRefreshIntervalDefault

// Refreshing is what the PolicyRefresher drives (*engine.Engine).
type Refreshing interface {
	RefreshApprovalPolicies(ctx context.Context) error
}

// PolicyRefresherConfig configures a PolicyRefresher.
type PolicyRefresherConfig struct {
	// Interval between reads (± 10%); default PolicyRefresherIntervalDefault.
	Interval time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// PolicyRefresher runs on every instance, leader or not: it rereads the approval policies
// set at run time into the engine every interval, so that submits match them without a
// statement of their own, and a change made through another instance holds submits here
// within one interval. A read that fails keeps the policies of the last one.
type PolicyRefresher struct {
	startstop.Base
	eng Refreshing
	cfg PolicyRefresherConfig
	log *slog.Logger
}

// NewPolicyRefresher returns a PolicyRefresher over eng.
func NewPolicyRefresher(eng Refreshing, cfg PolicyRefresherConfig) *PolicyRefresher {
	cfg.Interval = cmp.Or(cfg.Interval, PolicyRefresherIntervalDefault)
	return &PolicyRefresher{eng: eng, cfg: cfg, log: logging.Component(cfg.Logger, "policy_refresher")}
}

// Start reads the policies once, so that the first submits are matched against them, then
// rereads them until ctx ends or Stop is called. A first read that fails is logged: the
// configuration's policies hold meanwhile.
func (r *PolicyRefresher) Start(ctx context.Context) error {
	if err := r.RunOnce(ctx); err != nil {
		r.log.Warn("approval policies not read yet; the configuration's hold until they are", "error", err)
	}
	return r.StartLoop(ctx, startstop.Every(r.cfg.Interval, true, nil, r.log),
		r.RunOnce)
}

// RunOnce reads the policies once.
func (r *PolicyRefresher) RunOnce(ctx context.Context) error {
	return r.eng.RefreshApprovalPolicies(ctx)
}
