package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// Errors of approval decisions. The API answers 409, and 403 for ErrEscalated.
var (
	// ErrNotAwaitingApproval: the job is not held for approval (never was, or was decided,
	// or is a fan-out child whose parent's approval decides it).
	ErrNotAwaitingApproval = errors.New("job is not awaiting approval")
	// ErrAlreadyDecided: this approver has decided on the job already (a two-key request
	// needs two distinct approvers).
	ErrAlreadyDecided = errors.New("this approver has decided on the job already")
	// ErrEscalated: the request expired and was escalated; only an admin decides it now.
	ErrEscalated = errors.New("the approval request was escalated: only an admin decides it now")
	// ErrApprovalExpired: the request is past its TTL, which the leader's expirer is about to
	// act on (reject or escalate): no decision is taken on it any more.
	ErrApprovalExpired = errors.New("the approval request is past its TTL: it is being rejected or escalated")
)

// ApprovalStatusWithdrawn is the status of a request whose job was cancelled before anyone
// decided (a cancel of the job, or of its workflow).
const ApprovalStatusWithdrawn store.ApprovalStatus = "withdrawn"

// DecideParams is one approver's decision on a job held for approval.
type DecideParams struct {
	JobID   string
	Approve bool // false: reject
	Reason  string
	// Actor is the approver as the audit names it ("approver:NAME", "admin:<token id>"); two
	// keys are two distinct actors.
	Actor string
	// Admin says the approver is an admin, who alone decides escalated requests.
	Admin bool
}

// DecideOutcome is what a decision did.
type DecideOutcome struct {
	Job     store.Job
	Request store.ApprovalRequest
	// Approvals counts the approvals the request has (with this one).
	Approvals int
}

// Decide records one approver's decision on a job awaiting approval, with its audit row
// (job.approved or job.rejected, actor and reason), in one transaction. A rejection ends the
// request and cancels the job (a fan-out parent's children with it), the reason its last
// error. An approval that completes the request (the first, or the second distinct approver's
// for two-key) releases the job: to pending, or waiting when it has parents to wait for (a
// fan-out parent for its children, whose hold it lifts too). The released jobs are published
// after the commit.
func (e *Engine) Decide(ctx context.Context, p DecideParams) (DecideOutcome, error) {
	now := e.nowUTC()
	var (
		out      DecideOutcome
		released []store.Job
	)
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		out, released = DecideOutcome{}, nil
		job, req, err := lockHeld(ctx, tx, p.JobID)
		if err != nil {
			return err
		}
		if req.Status == store.ApprovalEscalated && !p.Admin {
			return ErrEscalated
		}
		if req.Status != store.ApprovalEscalated && req.ExpiresAt != nil && !req.ExpiresAt.After(now) {
			return ErrApprovalExpired
		}
		decision := store.DecisionReject
		if p.Approve {
			decision = store.DecisionApprove
		}
		err = tx.ApprovalDecide(ctx, store.ApprovalDecision{JobID: job.ID, Approver: p.Actor, Decision: decision, Reason: p.Reason, DecidedAt: now})
		if errors.Is(err, store.ErrConflict) {
			return ErrAlreadyDecided
		} else if err != nil {
			return err
		}
		var events []store.AuditEvent
		if !p.Approve {
			events, err = e.endHeld(ctx, tx, &job, &req, store.ApprovalRejected, EventRejected, p.Actor,
				map[string]any{"approver": p.Actor, "reason": p.Reason, "policy": req.Policy},
				fmt.Sprintf("rejected by %s: %s", p.Actor, p.Reason), now)
		} else {
			events, released, err = e.approve(ctx, tx, &job, &req, p, now, &out)
		}
		if err != nil {
			return err
		}
		out.Job, out.Request = job, req
		return tx.AuditInsert(ctx, events)
	})
	if err != nil {
		switch {
		case errors.Is(err, ErrNotAwaitingApproval), errors.Is(err, ErrAlreadyDecided), errors.Is(err, ErrEscalated),
			errors.Is(err, ErrApprovalExpired):
			return DecideOutcome{}, fmt.Errorf("job %s: %w", p.JobID, err)
		}
		return DecideOutcome{}, fmt.Errorf("decide on job %s: %w", p.JobID, err)
	}
	e.afterRelease(ctx, nil, released)
	return out, nil
}

// lockHeld locks a job held for approval and its open request.
func lockHeld(ctx context.Context, tx store.Tx, id string) (store.Job, store.ApprovalRequest, error) {
	jobs, err := tx.JobGetMany(ctx, []string{id}, true)
	if err != nil {
		return store.Job{}, store.ApprovalRequest{}, err
	}
	if len(jobs) == 0 {
		return store.Job{}, store.ApprovalRequest{}, store.ErrNotFound
	}
	job := jobs[0]
	if job.Status != store.JobAwaitingApproval || !job.Flow.Has(store.FlowApproval) {
		return store.Job{}, store.ApprovalRequest{}, fmt.Errorf("%w: it is %s", ErrNotAwaitingApproval, job.Status)
	}
	req, err := tx.ApprovalGet(ctx, id, true)
	if err != nil {
		return store.Job{}, store.ApprovalRequest{}, err
	}
	if !req.Status.Open() {
		return store.Job{}, store.ApprovalRequest{}, fmt.Errorf("%w: its request is %s", ErrNotAwaitingApproval, req.Status)
	}
	return job, req, nil
}

// approve records an approval: counted, and when the request has what it needs, the request
// ends approved and the job (and a fan-out parent's children) is released.
func (e *Engine) approve(ctx context.Context, tx store.Tx, job *store.Job, req *store.ApprovalRequest, p DecideParams,
	now time.Time, out *DecideOutcome) ([]store.AuditEvent, []store.Job, error) {
	decisions, err := tx.ApprovalDecisions(ctx, []string{job.ID})
	if err != nil {
		return nil, nil, err
	}
	for _, d := range decisions {
		if d.Decision == store.DecisionApprove {
			out.Approvals++
		}
	}
	final := out.Approvals >= req.Required
	ev := store.AuditEvent{TS: now, EventType: EventApproved, JobID: job.ID, Actor: p.Actor, Details: mustJSON(map[string]any{
		"approver": p.Actor, "reason": p.Reason, "policy": req.Policy, "approvals": out.Approvals, "required": req.Required, "final": final})}
	if !final {
		return []store.AuditEvent{ev}, nil, nil
	}
	if err := tx.ApprovalSetStatus(ctx, job.ID, req.Status, store.ApprovalApproved, now); err != nil {
		return nil, nil, err
	}
	req.Status = store.ApprovalApproved
	events, released, err := release(ctx, tx, []*store.Job{job}, p.Actor, now)
	if err != nil {
		return nil, nil, err
	}
	if job.Flow.Has(store.FlowFanOut) {
		children, err := heldChildren(ctx, tx, job)
		if err != nil {
			return nil, nil, err
		}
		evs, more, err := release(ctx, tx, children, p.Actor, now)
		if err != nil {
			return nil, nil, err
		}
		events, released = append(events, evs...), append(released, more...)
	}
	return append([]store.AuditEvent{ev}, events...), released, nil
}

// release moves jobs held for approval on: to waiting when they have parents to wait for,
// to pending otherwise. It returns the audit rows and the jobs now pending (to publish).
func release(ctx context.Context, tx store.Tx, jobs []*store.Job, actor string, now time.Time) ([]store.AuditEvent, []store.Job, error) {
	plans := make([]plan, 0, len(jobs))
	for _, j := range jobs {
		u := store.JobUpdate{To: store.JobPending, AvailableAt: &now, Enqueued: new(false), Now: now}
		if j.Flow.Has(store.FlowHasParents) {
			u = store.JobUpdate{To: store.JobWaiting, Now: now}
		}
		plans = append(plans, plan{job: j, actor: actor, steps: []step{{update: u, details: map[string]any{"reason": "approved"}}}})
	}
	events, err := transitionAll(ctx, tx, plans)
	if err != nil {
		return nil, nil, err
	}
	var pending []store.Job
	for _, j := range jobs {
		if j.Status == store.JobPending {
			pending = append(pending, *j)
		}
	}
	return events, pending, nil
}

// heldChildren locks a fan-out parent's children that its approval holds.
func heldChildren(ctx context.Context, tx store.Tx, job *store.Job) ([]*store.Job, error) {
	rows, err := tx.JobParents(ctx, []string{job.ID}, 0)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ParentID)
	}
	jobs, err := tx.JobGetMany(ctx, ids, true)
	if err != nil {
		return nil, err
	}
	var out []*store.Job
	for i := range jobs {
		if jobs[i].Status == store.JobAwaitingApproval {
			out = append(out, &jobs[i])
		}
	}
	return out, nil
}

// endHeld ends an open request as to (rejected, expired) with its event typ, and cancels its
// job (and what the job takes with it: a fan-out parent's children), why its last error.
func (e *Engine) endHeld(ctx context.Context, tx store.Tx, job *store.Job, req *store.ApprovalRequest, to store.ApprovalStatus,
	typ, actor string, details map[string]any, why string, now time.Time) ([]store.AuditEvent, error) {
	if err := tx.ApprovalSetStatus(ctx, job.ID, req.Status, to, now); err != nil {
		return nil, err
	}
	req.Status = to
	events := []store.AuditEvent{{TS: now, EventType: typ, JobID: job.ID, Actor: actor, Details: mustJSON(details)}}
	evs, err := cancelLocked(ctx, tx, job, actor, map[string]any{"reason": string(to)}, why, now)
	if err != nil {
		return nil, err
	}
	more, err := e.cancelFlowOf(ctx, tx, job, actor, now)
	if err != nil {
		return nil, err
	}
	return append(append(events, evs...), more...), nil
}

// withdrawApproval closes the open request of a job being cancelled otherwise (its own
// cancel, its workflow's), so that it is neither listed nor expired later.
func withdrawApproval(ctx context.Context, tx store.Tx, job *store.Job, now time.Time) error {
	if !job.Flow.Has(store.FlowApproval) {
		return nil
	}
	req, err := tx.ApprovalGet(ctx, job.ID, true)
	if errors.Is(err, store.ErrNotFound) || err == nil && !req.Status.Open() {
		return nil
	} else if err != nil {
		return err
	}
	return tx.ApprovalSetStatus(ctx, job.ID, req.Status, ApprovalStatusWithdrawn, now)
}

// afterRelease publishes jobs that a decision released (marks fenced by fence, nil: none)
// and wakes the resolver for those that now wait for their parents.
func (e *Engine) afterRelease(ctx context.Context, fence Fence, released []store.Job) {
	e.publishReleased(ctx, fence, released)
	e.WakeFlows()
}

// ExpireResult counts what one pass of the approval expirer did.
type ExpireResult struct {
	// Expired counts requests expired (their jobs cancelled), Escalated those escalated.
	Expired, Escalated int
}

// ExpireApprovals runs one pass of the leader's approval expirer behind fence (nil: the
// engine's): every waiting request past its expiry is, in its own fenced transaction, expired
// (on_expiry reject: the job is cancelled, job.approval_expired) or escalated (on_expiry
// escalate: it waits on for an admin, job.approval_escalated).
func (e *Engine) ExpireApprovals(ctx context.Context, fence Fence, batch int) (ExpireResult, error) {
	if fence == nil {
		fence = e.fence
	}
	var (
		res  ExpireResult
		errs []error
	)
	now := e.nowUTC()
	ids, err := e.store.ApprovalListExpired(ctx, now, batch)
	if err != nil {
		return res, fmt.Errorf("expire approvals: %w", err)
	}
	for _, id := range ids {
		var one ExpireResult
		err := e.fenced(ctx, fence, func(tx store.Tx) error {
			one = ExpireResult{}
			return e.expireOne(ctx, tx, id, now, &one)
		})
		switch {
		case errors.Is(err, store.ErrFenced):
			return res, fmt.Errorf("expire the approval of job %s: %w", id, err)
		case err != nil:
			errs = append(errs, fmt.Errorf("expire the approval of job %s: %w", id, err))
		default:
			res.Expired += one.Expired
			res.Escalated += one.Escalated
		}
	}
	return res, errors.Join(errs...)
}

// expireOne expires or escalates one request that is still waiting and past its expiry.
func (e *Engine) expireOne(ctx context.Context, tx store.Tx, id string, now time.Time, res *ExpireResult) error {
	job, req, err := lockHeld(ctx, tx, id)
	if errors.Is(err, ErrNotAwaitingApproval) || errors.Is(err, store.ErrNotFound) {
		return nil // decided, cancelled or gone since the listing
	}
	if err != nil {
		return err
	}
	if req.Status != store.ApprovalWaiting || req.ExpiresAt == nil || req.ExpiresAt.After(now) {
		return nil
	}
	details := map[string]any{"policy": req.Policy, "expired_at": *req.ExpiresAt, "on_expiry": req.OnExpiry}
	if req.OnExpiry == store.ExpiryEscalate {
		if err := tx.ApprovalSetStatus(ctx, id, store.ApprovalWaiting, store.ApprovalEscalated, now); err != nil {
			return err
		}
		res.Escalated++
		return tx.AuditInsert(ctx, []store.AuditEvent{{TS: now, EventType: EventApprovalEscalated, JobID: id, Actor: actorLeader,
			Details: mustJSON(details)}})
	}
	res.Expired++
	events, err := e.endHeld(ctx, tx, &job, &req, store.ApprovalExpired, EventApprovalExpired, actorLeader, details,
		"approval expired: nobody approved before "+req.ExpiresAt.Format(time.RFC3339), now)
	if err != nil {
		return err
	}
	return tx.AuditInsert(ctx, events)
}

// Approval is an open request with the decisions on it so far.
type Approval struct {
	store.ApprovalRequest
	Decisions []store.ApprovalDecision
}

// ListApprovals returns the open requests (waiting, escalated), oldest first, each with its
// decisions so far.
func (e *Engine) ListApprovals(ctx context.Context, p store.ApprovalListParams) ([]Approval, error) {
	reqs, err := e.store.ApprovalListOpen(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.JobID
	}
	decisions, err := e.store.ApprovalDecisions(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	byJob := map[string][]store.ApprovalDecision{}
	for _, d := range decisions {
		byJob[d.JobID] = append(byJob[d.JobID], d)
	}
	out := make([]Approval, len(reqs))
	for i, r := range reqs {
		out[i] = Approval{ApprovalRequest: r, Decisions: byJob[r.JobID]}
	}
	return out, nil
}
