package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/store"
)

// This file holds the approval policies and what holding a submit for approval writes; the
// decisions and the expiry are in approvals_decide.go (docs/architecture.md, "Workflows,
// fan-out and approvals").

// Audit event types of approvals.
const (
	EventApprovalRequested = "job.approval_requested"
	// EventApproved is one approver's approval; its details say how many the request has and
	// needs, and "final" on the one that released the job.
	EventApproved          = "job.approved"
	EventRejected          = "job.rejected"
	EventApprovalExpired   = "job.approval_expired"
	EventApprovalEscalated = "job.approval_escalated"
	// EventApprovalPolicySet and EventApprovalPolicyDeleted record the changes of the
	// policies set at run time.
	EventApprovalPolicySet     = "approval.policy_set"
	EventApprovalPolicyDeleted = "approval.policy_deleted"
)

// MaxApprovalTTL bounds a policy's TTL.
const MaxApprovalTTL = config.ApprovalTTLMax

// ApprovalPolicyNamePattern is what a policy's name must match.
var ApprovalPolicyNamePattern = ident.Pattern{Min: 1, Max: 64}

// policyActorConfig is the UpdatedBy of the configuration's policies.
const policyActorConfig = "config"

// approvalPolicies is the engine's view of the policies: the configuration's and the table's,
// a row of the table winning over the configuration's policy of its name, ordered as they are
// matched (two-key first, then by name). Submits read it without a lock or a statement.
type approvalPolicies struct {
	fromConfig []store.ApprovalPolicy
	all        atomic.Pointer[[]store.ApprovalPolicy]
}

// policiesOf converts the configuration's policies.
func policiesOf(cfg *config.Config) []store.ApprovalPolicy {
	out := make([]store.ApprovalPolicy, 0, len(cfg.Approvals.Policies))
	for _, p := range cfg.Approvals.Policies {
		out = append(out, store.ApprovalPolicy{Name: p.Name, Type: p.Type, Agent: p.Agent, MinGPUs: p.MinGPUs,
			MinGPUMemoryMB: p.MinGPUMemoryMB, TwoKey: p.TwoKey, TTL: cmp.Or(p.TTL, config.ApprovalTTLDefault),
			OnExpiry: store.ApprovalExpiry(cmp.Or(p.OnExpiry, string(store.ExpiryReject))), UpdatedBy: policyActorConfig})
	}
	return out
}

// set makes the table's policies (db) and the configuration's the ones in force.
func (a *approvalPolicies) set(db []store.ApprovalPolicy) {
	byName := map[string]store.ApprovalPolicy{}
	for _, p := range a.fromConfig {
		byName[p.Name] = p
	}
	for _, p := range db {
		byName[p.Name] = p
	}
	all := make([]store.ApprovalPolicy, 0, len(byName))
	for _, p := range byName {
		all = append(all, p)
	}
	slices.SortFunc(all, func(x, y store.ApprovalPolicy) int {
		if x.TwoKey != y.TwoKey {
			if x.TwoKey {
				return -1
			}
			return 1
		}
		return cmp.Compare(x.Name, y.Name)
	})
	a.all.Store(&all)
}

// match returns the policy that holds a submit of p (validated: its resources filled in), nil
// when none does: the first that matches, two-key ones first, then by name.
func (a *approvalPolicies) match(p *SubmitParams) *store.ApprovalPolicy {
	all := a.all.Load()
	if all == nil || len(*all) == 0 {
		return nil
	}
	gpus, memory := 0, int64(0)
	if r := p.Resources; r != nil && r.GPUMemoryMB > 0 {
		gpus = max(r.GPUs, 1)
		memory = int64(r.GPUMemoryMB) * int64(gpus)
	}
	for i := range *all {
		pol := &(*all)[i]
		switch {
		case pol.Type != "" && pol.Type != p.Type,
			pol.Agent != "" && pol.Agent != p.Agent,
			pol.MinGPUs > 0 && gpus < pol.MinGPUs,
			pol.MinGPUMemoryMB > 0 && memory < pol.MinGPUMemoryMB:
			continue
		}
		return pol
	}
	return nil
}

// ApprovalPolicies returns the policies in force, in the order they are matched.
func (e *Engine) ApprovalPolicies() []store.ApprovalPolicy {
	if all := e.approvals.all.Load(); all != nil {
		return slices.Clone(*all)
	}
	return nil
}

// RefreshApprovalPolicies rereads the table's policies: every instance does so every
// approvals.refresh_interval (flows.PolicyRefresher), and at once after a change through it.
func (e *Engine) RefreshApprovalPolicies(ctx context.Context) error {
	db, err := e.store.ApprovalPolicyList(ctx)
	if err != nil {
		return fmt.Errorf("refresh approval policies: %w", err)
	}
	e.approvals.set(db)
	return nil
}

// CheckApprovalPolicy checks a policy set at run time: its name, at least one criterion, a
// configured type, a TTL in 1s..30d, the expiry.
func (e *Engine) CheckApprovalPolicy(p *store.ApprovalPolicy) error {
	switch {
	case !ApprovalPolicyNamePattern.MatchString(p.Name):
		return invalid("name", "must be %s", ApprovalPolicyNamePattern.Rule())
	case p.Type != "" && e.cfg.JobType(p.Type) == nil:
		return invalid("type", "%s", UnknownTypeMessage(e.cfg, p.Type))
	case p.Agent != "" && !AgentPattern.MatchString(p.Agent):
		return invalid("agent", "must be %s", AgentPattern.Rule())
	case p.MinGPUs < 0:
		return invalid("min_gpus", "must not be negative")
	case p.MinGPUMemoryMB < 0:
		return invalid("min_gpu_memory_mb", "must not be negative")
	case p.Type == "" && p.Agent == "" && p.MinGPUs == 0 && p.MinGPUMemoryMB == 0:
		return invalid("type", "the policy would hold every job: set type, agent, min_gpus or min_gpu_memory_mb")
	}
	p.TTL = cmp.Or(p.TTL, config.ApprovalTTLDefault)
	if p.TTL < time.Second || p.TTL > config.ApprovalTTLMax {
		return invalid("ttl_seconds", "must be in 1..%d", int(config.ApprovalTTLMax.Seconds()))
	}
	p.OnExpiry = cmp.Or(p.OnExpiry, store.ExpiryReject)
	if p.OnExpiry != store.ExpiryReject && p.OnExpiry != store.ExpiryEscalate {
		return invalid("on_expiry", "must be reject or escalate")
	}
	return nil
}

// SetApprovalPolicy writes one policy (audited approval.policy_set, with the previous one)
// and puts it in force on this instance at once; the others within a refresh interval.
func (e *Engine) SetApprovalPolicy(ctx context.Context, p store.ApprovalPolicy, actor string) (store.ApprovalPolicy, error) {
	if err := e.CheckApprovalPolicy(&p); err != nil {
		return store.ApprovalPolicy{}, err
	}
	p.UpdatedBy, p.UpdatedAt = actor, e.nowUTC()
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		prev, err := tx.ApprovalPolicyList(ctx)
		if err != nil {
			return err
		}
		details := map[string]any{"policy": policyDetails(p)}
		if i := slices.IndexFunc(prev, func(x store.ApprovalPolicy) bool { return x.Name == p.Name }); i >= 0 {
			details["previous"] = policyDetails(prev[i])
		}
		if err := tx.ApprovalPolicyUpsert(ctx, p); err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{policyEvent(EventApprovalPolicySet, actor, p.UpdatedAt, details)})
	})
	if err != nil {
		return store.ApprovalPolicy{}, fmt.Errorf("set approval policy %s: %w", p.Name, err)
	}
	return p, e.RefreshApprovalPolicies(ctx)
}

// DeleteApprovalPolicy deletes one policy set at run time (audited approval.policy_deleted);
// ErrNotFound when there is none of the name (the configuration's cannot be deleted here).
func (e *Engine) DeleteApprovalPolicy(ctx context.Context, name, actor string) error {
	now := e.nowUTC()
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		prev, err := tx.ApprovalPolicyList(ctx)
		if err != nil {
			return err
		}
		if err := tx.ApprovalPolicyDelete(ctx, name); err != nil {
			return err
		}
		details := map[string]any{"name": name}
		if i := slices.IndexFunc(prev, func(x store.ApprovalPolicy) bool { return x.Name == name }); i >= 0 {
			details["previous"] = policyDetails(prev[i])
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{policyEvent(EventApprovalPolicyDeleted, actor, now, details)})
	})
	if err != nil {
		return fmt.Errorf("delete approval policy %s: %w", name, err)
	}
	return e.RefreshApprovalPolicies(ctx)
}

// policyDetails is a policy as its audit rows show it.
func policyDetails(p store.ApprovalPolicy) map[string]any {
	return map[string]any{"name": p.Name, "type": p.Type, "agent": p.Agent, "min_gpus": p.MinGPUs,
		"min_gpu_memory_mb": p.MinGPUMemoryMB, "two_key": p.TwoKey, "ttl_ms": p.TTL.Milliseconds(), "on_expiry": p.OnExpiry}
}

// policyEvent is an audit row of a policy change.
func policyEvent(typ, actor string, at time.Time, details map[string]any) store.AuditEvent {
	ev := store.AuditEvent{TS: at, EventType: typ, Actor: actor}
	ev.Details = mustJSON(details)
	return ev
}

// approvalHold is a job of a plan that an approval policy holds.
type approvalHold struct {
	jobID  string
	policy store.ApprovalPolicy
}

// holdForApproval makes a plan's job wait for the approval pol asks: awaiting_approval, with
// a request written in the plan's transaction and a job.approval_requested event.
func holdForApproval(pl *flowPlan, fj *flowJob, pol *store.ApprovalPolicy) {
	fj.status, fj.flow = store.JobAwaitingApproval, fj.flow|store.FlowApproval
	fj.details["approval_policy"] = pol.Name
	pl.holds = append(pl.holds, approvalHold{jobID: fj.r.p.JobID, policy: *pol})
}

// approvalRows are the requests of the plan's holds at now, with their events.
func approvalRows(pl *flowPlan, now time.Time) ([]store.ApprovalRequest, []store.AuditEvent) {
	rows := make([]store.ApprovalRequest, 0, len(pl.holds))
	events := make([]store.AuditEvent, 0, len(pl.holds))
	for _, h := range pl.holds {
		required := 1
		if h.policy.TwoKey {
			required = 2
		}
		expires := now.Add(h.policy.TTL).Truncate(time.Microsecond)
		rows = append(rows, store.ApprovalRequest{JobID: h.jobID, Agent: pl.agent, Policy: h.policy.Name, Required: required,
			Status: store.ApprovalWaiting, OnExpiry: h.policy.OnExpiry, ExpiresAt: &expires, CreatedAt: now})
		events = append(events, store.AuditEvent{TS: now, EventType: EventApprovalRequested, JobID: h.jobID, Actor: "policy:" + h.policy.Name,
			Details: mustJSON(map[string]any{"policy": h.policy.Name, "required": required, "two_key": h.policy.TwoKey,
				"expires_at": expires, "on_expiry": h.policy.OnExpiry})})
	}
	return rows, events
}
