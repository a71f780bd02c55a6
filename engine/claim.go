package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// Claim takes the jobs of the entries a worker read, each with its lease, all in one
// transaction: a compare-and-set pending → claimed per job (attempts+1, worker_id, owner_pool,
// lease_token) and a lease per job, with their audit rows. A GPU job (gpu_memory_mb > 0) gets a
// gpu lease on a GPU of the worker's node with enough free memory; every other job a cpu lease.
//
// Entries whose job is missing, not pending or not yet due are refused (the worker acks and
// drops them). A GPU job that no GPU of the node has room for is refused with retry_later and
// stays pending: that is not a failed attempt, and the worker leaves the entry for later
// delivery and backs off.
//
// The results a claim carries (ClaimParams.Results) are recorded first, in the same
// transaction, exactly as Complete records them; their leases are released before the new ones
// are placed, so the memory a finished GPU job frees is there for the next one. A result whose
// lease expired is reported as lease_expired among the outcomes and the claim goes on (Complete
// refuses such a call as a whole; here the claim is still good).
func (e *Engine) Claim(ctx context.Context, p ClaimParams) (ClaimResult, error) {
	if p.WorkerID == "" {
		return ClaimResult{}, invalid("worker_id", "is required")
	}
	// Before any row is locked and before the leases' clock starts (claim_entries.go).
	delivered, err := e.checkEntries(ctx, p)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim jobs of worker %s: %w", p.WorkerID, err)
	}
	now := e.nowUTC()
	var (
		res   ClaimResult
		freed freedNodes
	)
	err = e.store.WithTx(ctx, func(tx store.Tx) error {
		var err error
		res, freed, err = e.claimIn(ctx, tx, p, delivered, now)
		return err
	})
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim jobs: %w", err)
	}
	e.released(freed)
	return res, nil
}

// claimIn is Claim's transaction: it locks the call's rows, records the results, admits the
// entries, places their leases and writes it all. freed are the nodes of the GPU leases the
// results released.
func (e *Engine) claimIn(ctx context.Context, tx store.Tx, p ClaimParams, delivered map[entryKey]bool,
	now time.Time) (res ClaimResult, freed freedNodes, err error) {
	res = ClaimResult{Leases: map[string]store.Lease{}}
	byID, held, err := lockClaim(ctx, tx, p)
	if err != nil {
		return res, freed, err
	}
	freed = releasedNodes(held, byID)
	// Every row the claim's compare-and-sets write is locked: their checks can wait for
	// the next round trip.
	tx.DeferChecks()
	var events []store.AuditEvent
	if len(p.Results) > 0 {
		if res.Outcomes, events, err = e.completeIn(ctx, tx, p.WorkerID, p.Results, byID, held, now); err != nil {
			return res, freed, err
		}
	}
	claimable, gpuJobs := e.claimable(p.Items, byID, now, &res)
	if p.CheckEntries || p.Types != nil {
		claimable, gpuJobs = e.admit(p, delivered, claimable, &res)
	}
	plans, granted, err := e.placeClaims(ctx, tx, p, claimable, gpuJobs, now, &res)
	if err != nil {
		return res, freed, err
	}
	claimEvents, err := transitionAll(ctx, tx, plans)
	if err != nil {
		return res, freed, err
	}
	events = append(events, claimEvents...)
	for _, pl := range plans {
		res.Claimed = append(res.Claimed, *pl.job)
	}
	// Only a job with parents costs a read here (flows.go).
	if res.Parents, err = e.claimParents(ctx, tx, res.Claimed); err != nil {
		return res, freed, err
	}
	// The worker acks and drops an entry refused as not due. Such an entry is stale (the
	// job failed back to pending after it was published): hand the job back to the
	// dispatcher, which publishes it when due, so no dropped entry can strand it.
	if err := clearNotDue(ctx, tx, res.Refused, byID, now); err != nil {
		return res, freed, err
	}
	if err := tx.LeaseInsert(ctx, granted); err != nil {
		return res, freed, err
	}
	if err := tx.AuditInsert(ctx, events); err != nil {
		return res, freed, err
	}
	res.Cancel, err = cancelledOf(ctx, tx, p.WorkerID, p.InFlight)
	return res, freed, err
}

// lockClaim locks every job of the call at once, then the results' leases: the lock order of
// every transaction that writes both. Only the jobs to claim come with their payload, which the
// worker gets.
func lockClaim(ctx context.Context, tx store.Tx, p ClaimParams) (map[string]*store.Job, map[string]*store.Lease, error) {
	ids := make([]string, 0, len(p.Results)+len(p.Items))
	for _, r := range p.Results {
		ids = append(ids, r.JobID)
	}
	for _, it := range p.Items {
		ids = append(ids, it.JobID)
	}
	return lockJobsAndLeases(ctx, tx, ids, ids[len(p.Results):], p.Results)
}

// placeClaims prepares a lease for each claimable job and plans its claim; a job no GPU has
// room for, or that would take its agent past its GPU quota, is refused with retry_later
// (res.Refused) and stays pending, the denial recorded as its waiting reason.
func (e *Engine) placeClaims(ctx context.Context, tx store.Tx, p ClaimParams, claimable []candidate, gpuJobs bool,
	now time.Time, res *ClaimResult) ([]plan, []store.Lease, error) {
	// The scheduler's placements first: their leases are locked after the jobs, like the
	// results' leases, and before the node's GPUs.
	adopted, err := adopt(ctx, tx, p, claimable, now, res)
	if err != nil {
		return nil, nil, err
	}
	// Lock the node's GPUs before any non-locking read of the transaction, so the
	// reservations read are the latest committed (store.GPUExecutor.GPULockNode).
	var (
		node   *leases.NodeLock
		quotas *passQuotas // the GPU quotas of the jobs' agents (quota.go)
	)
	if gpuJobs {
		var err error
		if node, quotas, err = e.lockClaimNode(ctx, tx, p.NodeID, claimable, now); err != nil {
			return nil, nil, err
		}
	}
	// The room goes to the highest priority first; the request's order stands within a level.
	slices.SortStableFunc(claimable, func(a, b candidate) int { return cmp.Compare(b.job.Priority, a.job.Priority) })
	plans := make([]plan, 0, len(claimable))
	granted := make([]store.Lease, 0, len(claimable))
	waiting := map[string][]string{} // reason → the jobs refused for it whose reason changes
	for _, c := range claimable {
		attempts := c.job.Attempts + 1
		if c.job.LeaseToken != "" {
			if lease, ok := adopted[c.job.ID]; ok {
				plans = append(plans, claimPlan(c, p, attempts, lease, now))
				res.Leases[c.job.ID] = lease
			}
			continue
		}
		if why := quotas.claimOver(c.job, node); why != "" {
			res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedRetryLater, Detail: leases.ReasonQuota})
			if why != c.job.WaitingReason {
				waiting[why] = append(waiting[why], c.job.ID)
			}
			continue
		}
		if c.job.GPUMemoryMB == 0 {
			// Its lease reserves nothing: it lives in the job's row, written by the claim's
			// own update (leases.NewJobToken).
			lease := e.leases.PrepareJobLease(c.job, p.NodeID, now)
			plans = append(plans, claimPlan(c, p, attempts, lease, now))
			res.Leases[c.job.ID] = lease
			continue
		}
		lease, err := e.leases.Prepare(node, e.leaseParams(c.job, p, attempts), now)
		if d, ok := leases.IsDenial(err); ok {
			res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedRetryLater, Detail: d.Reason})
			if why := d.Reason + ": " + d.Message; why != c.job.WaitingReason {
				waiting[why] = append(waiting[why], c.job.ID)
			}
			continue
		} else if err != nil {
			return nil, nil, err
		}
		plans = append(plans, claimPlan(c, p, attempts, lease, now))
		granted = append(granted, lease)
		quotas.add(lease)
		res.Leases[c.job.ID] = lease
	}
	for why, ids := range waiting {
		if _, err := tx.JobSetWaiting(ctx, ids, why); err != nil {
			return nil, nil, err
		}
	}
	return plans, granted, nil
}

// adopt takes over the leases the scheduler reserved for the placed jobs among claimable: a
// lease that is active, of the job, on the claiming worker's node, is renewed from now and
// becomes the attempt's lease. Any other placed job is refused as placed_elsewhere (its entry
// is stale: the job was placed again, on this node or another, with an entry of its own).
func adopt(ctx context.Context, tx store.Tx, p ClaimParams, claimable []candidate, now time.Time,
	res *ClaimResult) (map[string]store.Lease, error) {
	var tokens []string
	for _, c := range claimable {
		if c.job.LeaseToken != "" {
			tokens = append(tokens, c.job.LeaseToken)
		}
	}
	if len(tokens) == 0 {
		return nil, nil
	}
	held, err := tx.LeaseGetMany(ctx, tokens, true)
	if err != nil {
		return nil, err
	}
	byToken := make(map[string]store.Lease, len(held))
	for _, l := range held {
		byToken[l.Token] = l
	}
	var renew []string
	for _, c := range claimable {
		if c.job.LeaseToken == "" {
			continue
		}
		l, ok := byToken[c.job.LeaseToken]
		switch {
		case !ok || l.Status != store.LeaseActive || !l.ExpiresAt.After(now) || l.JobID != c.job.ID:
			res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedPlacedElsewhere,
				Detail: "its placement on node " + c.job.PlacedNode + " has ended; the scheduler places it again"})
		case l.NodeID != p.NodeID:
			res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedPlacedElsewhere,
				Detail: "placed on node " + l.NodeID})
		case !ownTarget(c.job.PlacedNode, p):
			_, pool := store.SplitTarget(c.job.PlacedNode)
			res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedPlacedElsewhere,
				Detail: "placed for the workers of pool " + pool})
		default:
			renew = append(renew, l.Token)
		}
	}
	if len(renew) == 0 {
		return nil, nil
	}
	renewed, err := tx.LeaseHeartbeat(ctx, renew, now)
	if err != nil {
		return nil, err
	}
	out := make(map[string]store.Lease, len(renewed))
	for _, l := range renewed {
		out[l.JobID] = l
	}
	for _, c := range claimable {
		if _, ok := out[c.job.ID]; !ok && slices.Contains(renew, c.job.LeaseToken) {
			res.Refused = append(res.Refused, Refusal{JobID: c.job.ID, Reason: RefusedPlacedElsewhere,
				Detail: "its placement lease could not be renewed"})
		}
	}
	return out, nil
}

// claimPlan is the plan of one claim: pending → claimed as attempt attempts, under lease.
func claimPlan(c candidate, p ClaimParams, attempts int, lease store.Lease, now time.Time) plan {
	update := store.JobUpdate{
		To:         store.JobClaimed,
		Attempts:   &attempts,
		WorkerID:   &p.WorkerID,
		OwnerPool:  &p.PoolID,
		LeaseToken: &lease.Token,
		Now:        now,
	}
	if leases.InJobRow(lease.Token) {
		update.LeaseExpiresAt = &lease.ExpiresAt
	}
	if c.job.WaitingReason != "" {
		update.WaitingReason = new(string) // placed: no longer waiting
	}
	if streams.IsEntryID(c.item.MessageID) {
		// The entry the worker read is the job's live entry: its enqueued mark, 100 ms
		// behind the submit, has often not landed yet, and a Redis recovery would
		// otherwise not know the entry and publish the job again.
		update.StreamID = &c.item.MessageID
	}
	return plan{job: c.job, actor: "worker:" + p.WorkerID, steps: []step{{
		update: update,
		// The grant of the job's lease is recorded here, not in a row of its own.
		details: map[string]any{"attempt": attempts, "node_id": p.NodeID, "message_id": c.item.MessageID,
			"lease": leases.GrantDetails(lease)},
	}}}
}

// candidate is a job a claim may take, with the entry that asked for it.
type candidate struct {
	job  *store.Job
	item ClaimItem
}

// claimable sorts the entries of a claim into refusals (written to res) and the jobs to take,
// in request order, each once; gpuJobs reports whether any of them needs a GPU.
func (e *Engine) claimable(items []ClaimItem, byID map[string]*store.Job, now time.Time, res *ClaimResult) (out []candidate, gpuJobs bool) {
	taken := make(map[string]bool, len(items))
	for _, it := range items {
		job, ok := byID[it.JobID]
		switch {
		case !ok:
			res.Refused = append(res.Refused, Refusal{JobID: it.JobID, Reason: RefusedNotFound})
		case job.Status != store.JobPending || taken[it.JobID]:
			res.Refused = append(res.Refused, Refusal{JobID: it.JobID, Reason: RefusedNotPending})
		case job.AvailableAt.After(now):
			res.Refused = append(res.Refused, Refusal{JobID: it.JobID, Reason: RefusedNotDue})
		case job.LeaseToken == "" && (!job.Constraints.Empty() || job.PoolID != "" || job.ModelID != "") &&
			!e.cfg.Scheduler.Disabled:
			// A stale entry of a constrained or routed job whose placement expired: claimed
			// here, it would run wherever it was read, its constraints and route unchecked.
			res.Refused = append(res.Refused, Refusal{JobID: it.JobID, Reason: RefusedPlacedElsewhere,
				Detail: "not placed: the scheduler places it"})
		default:
			taken[it.JobID] = true
			out = append(out, candidate{job: job, item: it})
			gpuJobs = gpuJobs || needsNode(job)
		}
	}
	return out, gpuJobs
}

// needsNode reports whether claiming job places it on the claiming worker's node: a GPU job
// that the scheduler has not placed (a placed one adopts its lease, adopt).
func needsNode(job *store.Job) bool { return job.GPUMemoryMB > 0 && job.LeaseToken == "" }

// clearNotDue clears the outbox flag of the enqueued jobs refused as not due.
func clearNotDue(ctx context.Context, tx store.Tx, refused []Refusal, byID map[string]*store.Job, now time.Time) error {
	var ids []string
	for _, r := range refused {
		if j := byID[r.JobID]; r.Reason == RefusedNotDue && j != nil && j.Enqueued {
			ids = append(ids, r.JobID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.JobClearEnqueued(ctx, store.JobPending, ids, now)
	return err
}

// leaseParams is the lease of one attempt of job by the claiming worker: a gpu lease of the
// job's memory on the worker's node, or a cpu lease; held for the job's agent.
func (e *Engine) leaseParams(job *store.Job, p ClaimParams, attempt int) leases.GrantParams {
	meta, _ := json.Marshal(struct { // as submittedEvent's details: a struct, keys sorted
		Attempt  int    `json:"attempt"`
		PoolID   string `json:"pool_id"`
		WorkerID string `json:"worker_id"`
	}{attempt, p.PoolID, p.WorkerID})
	lp := leases.GrantParams{
		Agent: job.Agent, JobID: job.ID, NodeID: p.NodeID, Mode: store.LeaseCPU, Metadata: meta,
	}
	if job.GPUMemoryMB > 0 {
		lp.Mode, lp.MemoryMB = store.LeaseGPU, int64(job.GPUMemoryMB)
		lp.GPUs, lp.Exclusive = job.GPUCount(), job.GPUExclusive
	}
	return lp
}

// Start records that the handlers of claimed jobs began (claimed → running). Jobs that are not
// this worker's claimed jobs are skipped; the answer lists those of them that were cancelled.
func (e *Engine) Start(ctx context.Context, p StartParams) ([]string, error) {
	if p.WorkerID == "" {
		return nil, invalid("worker_id", "is required")
	}
	now := e.nowUTC()
	var cancel []string
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		byID, _, err := lockJobsAndLeases(ctx, tx, p.JobIDs, nil, nil)
		if err != nil {
			return err
		}
		var plans []plan
		started := make(map[string]bool, len(p.JobIDs))
		for _, id := range p.JobIDs {
			job, ok := byID[id]
			if !ok || job.Status != store.JobClaimed || job.WorkerID != p.WorkerID || started[id] {
				continue
			}
			started[id] = true // an id listed twice starts once
			plans = append(plans, plan{job: job, actor: "worker:" + p.WorkerID, steps: []step{{
				update: store.JobUpdate{To: store.JobRunning, StartedAt: &now, Now: now},
			}}})
		}
		events, err := transitionAll(ctx, tx, plans)
		if err != nil {
			return err
		}
		if err := tx.AuditInsert(ctx, events); err != nil {
			return err
		}
		// The rows are locked and up to date in memory: no second read to tell the cancelled.
		holders := make(map[string]store.JobHolder, len(byID))
		for id, j := range byID {
			holders[id] = store.JobHolder{ID: id, Status: j.Status, WorkerID: j.WorkerID}
		}
		cancel = stopped(p.WorkerID, p.JobIDs, holders)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("start jobs: %w", err)
	}
	return cancel, nil
}

// jobsByID loads the existing jobs among ids, deduplicated, locking them when forUpdate.
func jobsByID(ctx context.Context, tx store.Executor, ids []string, forUpdate bool) (map[string]*store.Job, error) {
	seen := make(map[string]bool, len(ids))
	uniq := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	jobs, err := tx.JobGetMany(ctx, uniq, forUpdate)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*store.Job, len(jobs))
	for i := range jobs {
		out[jobs[i].ID] = &jobs[i]
	}
	return out, nil
}

// cancelledOf returns the jobs among inFlight that the worker must stop: cancelled, or no longer
// its attempt (rescued and handed to another worker, or gone).
func cancelledOf(ctx context.Context, tx store.Executor, workerID string, inFlight []string) ([]string, error) {
	if len(inFlight) == 0 {
		return nil, nil
	}
	// The holders only: a worker lists every job it runs on each call, and their payloads
	// (up to max_payload_bytes each) are of no use here.
	holders, err := tx.JobHolders(ctx, inFlight)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]store.JobHolder, len(holders))
	for _, h := range holders {
		byID[h.ID] = h
	}
	return stopped(workerID, inFlight, byID), nil
}

// stopped returns the jobs among inFlight that the worker must stop, given their holders by id:
// gone, cancelled or otherwise settled, or another worker's attempt.
func stopped(workerID string, inFlight []string, byID map[string]store.JobHolder) []string {
	var out []string
	for _, id := range inFlight {
		j, ok := byID[id]
		if !ok || j.WorkerID != workerID || (j.Status != store.JobClaimed && j.Status != store.JobRunning) {
			out = append(out, id)
		}
	}
	return out
}
