package flows

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
)

// ApprovalExpirer defaults.
const (
	// ApprovalExpirerIntervalDefault is the time between two passes.
	ApprovalExpirerIntervalDefault = config.ApprovalsExpireIntervalDefault
	// ApprovalExpirerBatchDefault bounds the requests one pass expires.
	ApprovalExpirerBatchDefault = 200
)

// Expiring is what the ApprovalExpirer drives (*engine.Engine).
type Expiring interface {
	ExpireApprovals(ctx context.Context, fence engine.Fence, batch int) (engine.ExpireResult, error)
}

// ApprovalExpirerConfig configures an ApprovalExpirer.
type ApprovalExpirerConfig struct {
	// Interval between passes (± 10%); default ApprovalExpirerIntervalDefault.
	Interval time.Duration
	// Batch is the most requests one pass expires (default ApprovalExpirerBatchDefault).
	Batch int
	// Fence guards every write of a pass (the leader's term).
	Fence engine.Fence
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// ApprovalExpirer is the leader's loop that ends the approval requests nobody decided within
// their TTL: rejected (the job cancelled) or escalated to the admins, as each policy says, with
// an audit event either way.
type ApprovalExpirer struct {
	startstop.Base
	eng Expiring
	cfg ApprovalExpirerConfig
	log *slog.Logger
}

// NewApprovalExpirer returns an ApprovalExpirer over eng.
func NewApprovalExpirer(eng Expiring, cfg ApprovalExpirerConfig) *ApprovalExpirer {
	cfg.Interval = cmp.Or(cfg.Interval, ApprovalExpirerIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, ApprovalExpirerBatchDefault)
	return &ApprovalExpirer{eng: eng, cfg: cfg, log: logging.Component(cfg.Logger, "approval_expirer")}
}

// Start runs the expirer until ctx ends or Stop is called. It returns at once.
func (x *ApprovalExpirer) Start(ctx context.Context) error {
	return x.StartLoop(ctx, startstop.Every(x.cfg.Interval, x.cfg.Stagger, nil, x.log), startstop.Pass(x.RunOnce))
}

// RunOnce runs one pass (the loop's body; tests call it directly).
func (x *ApprovalExpirer) RunOnce(ctx context.Context) (engine.ExpireResult, error) {
	res, err := x.eng.ExpireApprovals(ctx, x.cfg.Fence, x.cfg.Batch)
	if res != (engine.ExpireResult{}) {
		x.log.Info("approval requests expired", "expired", res.Expired, "escalated", res.Escalated)
	}
	return res, err
}
