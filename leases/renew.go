package leases

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
)

// MaxRenewTokens bounds the leases of one renew call (a worker's in-flight jobs).
const MaxRenewTokens = 10000

// RenewParams is one renew call of a worker: the leases of its in-flight jobs and, optionally,
// its node's telemetry.
type RenewParams struct {
	WorkerID string
	NodeID   string
	Tokens   []string
	// Snapshot is the node's telemetry (nil: none sent); its NodeID must be NodeID.
	Snapshot *telemetry.Snapshot
}

// RenewResult answers a renew call.
type RenewResult struct {
	// Renewed are the leases extended, with their new expiry.
	Renewed []store.Lease
	// Gone are the tokens that can no longer be renewed: released, expired, active past their
	// expiry (expired, not yet purged), or unknown (Status empty). Their jobs are no longer the
	// worker's to run: it stops them, and their results would be refused anyway.
	Gone []GoneLease
	// Reserved is what the active leases reserve on each GPU of the node, for a worker whose
	// simulated GPUs follow the reservations (FollowReserved).
	Reserved map[int]int64
}

// GoneLease is a token a renew call could not extend.
type GoneLease struct {
	Token  string
	JobID  string
	Status store.LeaseStatus // "" for an unknown token
}

// Renew extends the worker's leases by their TTL in one statement, records the node's telemetry
// when sent, and reads the node's reservations. A lease is never resurrected: one that has
// ended, or whose expiry passed without a heartbeat, is reported gone even though its row may
// still say active until the purger runs.
func (m *Manager) Renew(ctx context.Context, p RenewParams) (RenewResult, error) {
	if len(p.Tokens) > MaxRenewTokens {
		return RenewResult{}, fmt.Errorf("renew leases: %d tokens, over the limit of %d", len(p.Tokens), MaxRenewTokens)
	}
	if p.Snapshot != nil && p.Snapshot.NodeID != p.NodeID {
		return RenewResult{}, fmt.Errorf("renew leases: telemetry of node %q sent for node %q", p.Snapshot.NodeID, p.NodeID)
	}
	now := m.nowUTC()
	var res RenewResult
	if len(p.Tokens) > 0 {
		leases, err := m.heartbeat(ctx, p.Tokens, now)
		if err != nil {
			return RenewResult{}, fmt.Errorf("renew leases of worker %s: %w", p.WorkerID, err)
		}
		found := make(map[string]bool, len(leases))
		for _, l := range leases {
			found[l.Token] = true
			if l.Status == store.LeaseActive && l.ExpiresAt.After(now) {
				res.Renewed = append(res.Renewed, l)
			} else {
				res.Gone = append(res.Gone, GoneLease{Token: l.Token, JobID: l.JobID, Status: l.Status})
			}
		}
		for _, t := range p.Tokens {
			if !found[t] {
				found[t] = true
				res.Gone = append(res.Gone, GoneLease{Token: t})
			}
		}
		m.logGone(ctx, p.WorkerID, res.Gone)
	}
	if p.Snapshot != nil {
		if err := m.RecordSnapshot(ctx, *p.Snapshot); err != nil {
			return RenewResult{}, err
		}
	}
	if p.NodeID != "" {
		reserved, err := m.Reserved(ctx, p.NodeID)
		if err != nil {
			return RenewResult{}, err
		}
		res.Reserved = reserved
	}
	return res, nil
}

// heartbeat renews the leases of tokens, in orchestrator_leases and in job rows, and returns
// every one that exists, renewed or not. A lease of a job row that its job no longer holds
// (the attempt ended or was rescued) is reported released, or expired when the job holds it
// still but its expiry passed.
func (m *Manager) heartbeat(ctx context.Context, tokens []string, now time.Time) ([]store.Lease, error) {
	var inTable, inRows, jobIDs []string
	for _, t := range tokens {
		if id, ok := JobOfToken(t); ok {
			inRows, jobIDs = append(inRows, t), append(jobIDs, id)
		} else {
			inTable = append(inTable, t)
		}
	}
	var out []store.Lease
	if len(inTable) > 0 {
		ls, err := m.store.LeaseHeartbeat(ctx, inTable, now)
		if err != nil {
			return nil, err
		}
		out = ls
	}
	if len(inRows) == 0 {
		return out, nil
	}
	jobs, err := m.store.JobLeaseHeartbeat(ctx, jobIDs, inRows, now.Add(m.cfg.TTL), now)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*store.Job, len(jobs))
	for i := range jobs {
		byID[jobs[i].ID] = &jobs[i]
	}
	for i, t := range inRows {
		job := byID[jobIDs[i]]
		if job == nil {
			continue // unknown
		}
		l, ok := JobLease(job, "", m.cfg.TTL)
		switch {
		case !ok || l.Token != t:
			status, err := EndedJobLease(ctx, m.store, job.ID, t)
			if err != nil {
				return nil, err
			}
			l = store.Lease{Token: t, JobID: job.ID, Mode: store.LeaseCPU, Status: status}
		case !l.ExpiresAt.After(now):
			l.Status = store.LeaseExpired
		}
		out = append(out, l)
	}
	return out, nil
}

// logGone says which leases a renewal found gone. Released ones are routine under load: a
// renewal in flight while the worker's round records its jobs' results finds those leases
// released, so a renewal that found nothing else is a debug line. Expired or unknown leases
// (the worker fell silent, or the leases were purged) are worth an info line.
func (m *Manager) logGone(ctx context.Context, workerID string, gone []GoneLease) {
	if len(gone) == 0 {
		return
	}
	released := 0
	for _, g := range gone {
		if g.Status == store.LeaseReleased {
			released++
		}
	}
	level := slog.LevelInfo
	if released == len(gone) {
		level = slog.LevelDebug
	}
	m.log.Log(ctx, level, "worker renewed leases that are gone", "worker_id", workerID, "gone", len(gone),
		"released", released)
}
