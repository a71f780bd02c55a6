package leases

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// A job without a GPU holds its lease in its own row: the lease reserves nothing, so it needs no
// row of its own, and the claim and the completion that write the job row anyway carry it. Its
// token names the job (NewJobToken), so that a heartbeat finds the row by primary key; its
// expiry is orchestrator_jobs.lease_expires_at. It behaves as a lease of orchestrator_leases
// does: renewed by heartbeats, never resurrected once past its expiry, expired and rescued by
// the lease purger, released by the job's completion or cancellation; zombie results are refused
// the same way. GPU leases, the scheduler's placements and agents' direct leases stay in
// orchestrator_leases.

// JobTokenPrefix starts the token of a lease held in a job row: JobTokenPrefix, 128 random bits
// in hex, "_", the job id.
const JobTokenPrefix = store.JobLeaseTokenPrefix

// jobTokenRandom is the length of the prefix and random part with the separator.
const jobTokenRandom = len(JobTokenPrefix) + 32 + 1

// JobTokenMax is the longest token a lease in a job row has (job ids are at most 128 bytes);
// the columns that hold tokens take it.
const JobTokenMax = jobTokenRandom + 128

// NewJobToken returns a fresh token for a lease held in job id's row.
func NewJobToken(jobID string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand aborts the process rather)
	return JobTokenPrefix + hex.EncodeToString(b[:]) + "_" + jobID
}

// JobOfToken returns the job whose row holds the lease of token, and false for a token of
// orchestrator_leases.
func JobOfToken(token string) (string, bool) {
	if len(token) <= jobTokenRandom || !strings.HasPrefix(token, JobTokenPrefix) || token[jobTokenRandom-1] != '_' {
		return "", false
	}
	return token[jobTokenRandom:], true
}

// InJobRow reports whether token names a lease held in a job row.
func InJobRow(token string) bool {
	_, ok := JobOfToken(token)
	return ok
}

// JobLease is the lease job holds in its row, as a store.Lease (mode cpu, on nodeID, which
// the row does not keep: "" when the caller does not know it), and false when the job holds
// none: its token is not one of a job row, or it is not claimed or running. The status is
// active while the expiry is ahead or just passed (the purger has not expired it yet), as for
// a lease of orchestrator_leases.
func JobLease(job *store.Job, nodeID string, ttl time.Duration) (store.Lease, bool) {
	if !InJobRow(job.LeaseToken) || job.LeaseExpiresAt == nil ||
		(job.Status != store.JobClaimed && job.Status != store.JobRunning) {
		return store.Lease{}, false
	}
	return store.Lease{
		Token: job.LeaseToken, Agent: job.Agent, JobID: job.ID, NodeID: nodeID, Mode: store.LeaseCPU,
		TTL: ttl, Status: store.LeaseActive, CreatedAt: job.UpdatedAt, ExpiresAt: *job.LeaseExpiresAt,
		LastHeartbeat: job.LeaseExpiresAt.Add(-ttl),
	}, true
}

// PrepareJobLease is the lease a claim of job by a worker on nodeID gives it in its row, from
// now for the manager's TTL.
func (m *Manager) PrepareJobLease(job *store.Job, nodeID string, now time.Time) store.Lease {
	return store.Lease{
		Token: NewJobToken(job.ID), Agent: job.Agent, JobID: job.ID, NodeID: nodeID, Mode: store.LeaseCPU,
		TTL: m.cfg.TTL, Status: store.LeaseActive, CreatedAt: now, ExpiresAt: now.Add(m.cfg.TTL), LastHeartbeat: now,
	}
}

// EndedJobLease tells how the lease of token, held in job jobID's row once and no longer, ended:
// expired when the purger expired it (its lease.expired audit row, written with the rescue that
// cleared the token), released otherwise. A zombie worker's result and renewal learn it so, as
// they do from a lease row's status. It reads the job's audit rows: for the rare token that is
// gone, never on the path of a live lease.
func EndedJobLease(ctx context.Context, ex store.AuditExecutor, jobID, token string) (store.LeaseStatus, error) {
	after := int64(0)
	for {
		evs, err := ex.AuditList(ctx, store.AuditListParams{JobID: jobID, AfterID: after, Limit: 500})
		if err != nil {
			return "", err
		}
		for _, ev := range evs {
			if ev.LeaseToken == token && ev.EventType == EventExpired {
				return store.LeaseExpired, nil
			}
		}
		if len(evs) < 500 {
			return store.LeaseReleased, nil
		}
		after = evs[len(evs)-1].ID
	}
}
