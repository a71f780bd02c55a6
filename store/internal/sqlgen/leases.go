package sqlgen

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of leases that both dialects share (store.LeaseExecutor,
// store.StatsReader).

// LeaseInsert inserts the leases with one multi-row INSERT per chunk. A token that exists
// already is store.ErrConflict: at once, or, through a Holder (a MariaDB transaction), from the
// next statement, which then fails with it.
func (e Executor) LeaseInsert(ctx context.Context, leases []store.Lease) error {
	for chunk := range slices.Chunk(leases, max(e.d.Chunk, 1)) {
		var q strings.Builder
		q.WriteString("INSERT INTO orchestrator_leases (" + LeaseColumns + ") VALUES ")
		args := make([]any, 0, 16*len(chunk))
		for i, l := range chunk {
			if !ASCIIID(l.Token) || !ASCIIID(l.JobID) {
				return fmt.Errorf("insert leases: token %q or job id %q is not ASCII", l.Token, l.JobID)
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			var gpu any
			if l.GPUIndex != nil {
				gpu = *l.GPUIndex
			}
			args = append(args, l.Token, l.Agent, NullString(l.JobID), l.NodeID, gpu, MoreGPUs(l), string(l.Mode),
				l.MemoryMB, l.Exclusive, l.TTL.Milliseconds(), string(l.Status), e.d.Time(l.CreatedAt),
				e.d.Time(l.ExpiresAt), e.d.Time(l.LastHeartbeat), e.d.nullTimePtr(l.EndedAt), JSONArg(l.Metadata))
		}
		if err := e.d.ExecBlind(ctx, e.w, "insert leases", q.String(), args); err != nil {
			return fmt.Errorf("insert %d leases: %w", len(chunk), err)
		}
	}
	return nil
}

// LeaseGet returns one lease or store.ErrNotFound, locked when forUpdate (Dialect.ForUpdate).
func (e Executor) LeaseGet(ctx context.Context, token string, forUpdate bool) (store.Lease, error) {
	return getOne(ctx, e, "get lease", LeaseColumns+" FROM orchestrator_leases WHERE token", token, forUpdate, e.d.ScanLease)
}

// LeaseGetMany returns the existing leases among tokens, in token order per chunk; with
// forUpdate they are locked in that order, which keeps concurrent callers from deadlocking each
// other.
func (e Executor) LeaseGetMany(ctx context.Context, tokens []string, forUpdate bool) ([]store.Lease, error) {
	out, err := e.leasesByToken(ctx, e.r, DistinctIDs(tokens), forUpdate)
	if err != nil {
		return nil, fmt.Errorf("get leases: %w", err)
	}
	return out, nil
}

// LeaseExpiredNodes returns the nodes of the expired leases of each job among jobIDs
// (idx_leases_job), each once.
func (e Executor) LeaseExpiredNodes(ctx context.Context, jobIDs []string) (map[string][]string, error) {
	type pair struct{ job, node string }
	pairs, err := chunked(DistinctIDs(jobIDs), e.d.Chunk, func(chunk []string) ([]pair, error) {
		return query(ctx, e.d, e.r, func(row Scanner) (pair, error) {
			var p pair
			return p, row.Scan(&p.job, &p.node)
		}, "SELECT DISTINCT job_id, node_id FROM orchestrator_leases WHERE job_id IN ("+Placeholders(len(chunk))+
			") AND status = ?", append(Args(chunk), string(store.LeaseExpired))...)
	})
	if err != nil {
		return nil, fmt.Errorf("list expired leases' nodes: %w", err)
	}
	out := map[string][]string{}
	for _, p := range pairs {
		out[p.job] = append(out[p.job], p.node)
	}
	return out, nil
}

// LeaseJobsPerNode counts the jobs with an active lease, per type, agent, node, and claiming
// worker (a job claimed, or further) or placement target (a pending job placed): the active
// leases (idx_leases_status_expires; as many as jobs run and are placed) joined to their jobs,
// and the jobs that hold a lease in their row, on their worker's node (liveJobLease).
func (e Executor) LeaseJobsPerNode(ctx context.Context) ([]store.NodeJobCount, error) {
	out, err := query(ctx, e.d, e.r, func(row Scanner) (store.NodeJobCount, error) {
		var c store.NodeJobCount
		var status string
		err := row.Scan(&c.Type, &c.Agent, &c.Node, &status, &c.Worker, &c.Target, &c.Jobs)
		if store.JobStatus(status) == store.JobPending {
			c.Worker = "" // placed, not claimed: a retried job's row still names its last worker
		} else {
			c.Target = ""
		}
		return c, err
	}, `SELECT j.type, j.agent, l.node_id, j.status, j.worker_id, j.placed_node, COUNT(*) FROM orchestrator_leases l
		JOIN orchestrator_jobs j ON j.job_id = l.job_id
		WHERE l.status = ? AND l.job_id IS NOT NULL
		GROUP BY j.type, j.agent, l.node_id, j.status, j.worker_id, j.placed_node
		UNION ALL
		SELECT j.type, j.agent, COALESCE(w.node_id, ''), j.status, j.worker_id, j.placed_node, COUNT(*)
		FROM orchestrator_jobs j LEFT JOIN workers w ON w.worker_id = j.worker_id
		WHERE `+liveJobLeaseOf("j.")+`
		GROUP BY j.type, j.agent, w.node_id, j.status, j.worker_id, j.placed_node`, string(store.LeaseActive))
	if err != nil {
		return nil, fmt.Errorf("count jobs per node: %w", err)
	}
	return out, nil
}

// LeaseHoldings sums the active gpu leases of each of agents, grouped by gpu_indexes: a group's
// leases have the same number of GPUs (one, plus those listed there), which multiplies its
// count and its memory.
func (e Executor) LeaseHoldings(ctx context.Context, agents []string) (map[string]store.GPUHolding, error) {
	type group struct {
		agent, more string
		leases      int
		memoryMB    int64
	}
	groups, err := chunked(DistinctIDs(agents), e.d.Chunk, func(chunk []string) ([]group, error) {
		return query(ctx, e.d, e.r, func(row Scanner) (group, error) {
			var g group
			return g, row.Scan(&g.agent, &g.more, &g.leases, &g.memoryMB)
		}, "SELECT agent_name, gpu_indexes, COUNT(*), COALESCE(SUM(memory_mb), 0) FROM orchestrator_leases WHERE agent_name IN ("+
			Placeholders(len(chunk))+") AND status = ? AND mode = ? GROUP BY agent_name, gpu_indexes",
			append(Args(chunk), string(store.LeaseActive), string(store.LeaseGPU))...)
	})
	if err != nil {
		return nil, fmt.Errorf("sum the agents' gpu leases: %w", err)
	}
	out := map[string]store.GPUHolding{}
	for _, g := range groups {
		gpus, err := GPUIndexes(0, g.more)
		if err != nil {
			return nil, fmt.Errorf("sum the gpu leases of %s: %w", g.agent, err)
		}
		h := out[g.agent]
		h.GPUs += g.leases * len(gpus)
		h.MemoryMB += g.memoryMB * int64(len(gpus))
		out[g.agent] = h
	}
	return out, nil
}

// leasesByToken reads the leases of tokens (distinct) on x.
func (e Executor) leasesByToken(ctx context.Context, x Reader, tokens []string, forUpdate bool) ([]store.Lease, error) {
	return chunked(tokens, e.d.Chunk, func(chunk []string) ([]store.Lease, error) {
		return query(ctx, e.d, x, e.d.ScanLease, e.d.SelectLeases(len(chunk), forUpdate), Args(chunk)...)
	})
}

// SelectLeases reads n leases by token in token order, locking them when forUpdate.
func (d *Driver) SelectLeases(n int, forUpdate bool) string {
	return "SELECT " + LeaseColumns + " FROM orchestrator_leases WHERE token IN (" + Placeholders(n) +
		") ORDER BY token" + d.lock(forUpdate)
}

// LeaseList returns leases newest first. Limit is clamped to 1..1000 (default 100).
func (e Executor) LeaseList(ctx context.Context, p store.LeaseListParams) ([]store.Lease, error) {
	if !ASCIIID(p.JobID) {
		return nil, nil
	}
	var f filter
	f.addIf("status = ?", string(p.Status))
	f.addIf("agent_name = ?", p.Agent)
	f.addIf("node_id = ?", p.NodeID)
	f.addIf("job_id = ?", p.JobID)
	leases, err := query(ctx, e.d, e.r, e.d.ScanLease, "SELECT "+LeaseColumns+" FROM orchestrator_leases"+f.sql()+
		" ORDER BY created_at DESC, token DESC LIMIT ?", append(f.args, ClampLimit(p.Limit, ListLimitDefault, ListLimitMax))...)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return leases, nil
}

// LeaseHeartbeat extends the active, unexpired leases among tokens by their own TTL
// (Dialect.PlusTTL) in one UPDATE per chunk of tokens, then reads the rows back through the
// same connection, so that a heartbeat outside a transaction reports what it wrote.
func (e Executor) LeaseHeartbeat(ctx context.Context, tokens []string, now time.Time) ([]store.Lease, error) {
	tokens = DistinctIDs(tokens)
	if len(tokens) == 0 {
		return nil, nil
	}
	at := e.d.Time(now)
	for chunk := range slices.Chunk(tokens, max(e.d.Chunk, 1)) {
		args := slices.Concat([]any{at, at}, Args(chunk), []any{string(store.LeaseActive), at})
		_, err := e.w.ExecContext(ctx, `UPDATE `+e.d.table("orchestrator_leases")+`
			SET expires_at = `+e.d.PlusTTL+`, last_heartbeat = ?
			WHERE token IN (`+Placeholders(len(chunk))+`) AND status = ? AND expires_at > ?`, args...)
		if err != nil {
			return nil, fmt.Errorf("heartbeat leases: %w", e.d.MapErr(err))
		}
	}
	leases, err := e.leasesByToken(ctx, e.w, tokens, false)
	if err != nil {
		return nil, fmt.Errorf("heartbeat leases: %w", err)
	}
	return leases, nil
}

// LeaseListExpired returns active leases past their expiry, oldest expiry first. Limit is
// clamped to 1..10000 (default 100).
func (e Executor) LeaseListExpired(ctx context.Context, now time.Time, limit int) ([]store.Lease, error) {
	leases, err := query(ctx, e.d, e.r, e.d.ScanLease, "SELECT "+LeaseColumns+` FROM orchestrator_leases
		WHERE status = ? AND expires_at <= ? ORDER BY expires_at, token LIMIT ?`,
		string(store.LeaseActive), e.d.Time(now), ClampLimit(limit, DispatchLimitDefault, DispatchLimitMax))
	if err != nil {
		return nil, fmt.Errorf("list expired leases: %w", err)
	}
	return leases, nil
}

// LeaseCountActive counts the active leases of each mode (store.StatsReader): those of
// orchestrator_leases (index idx_leases_status_expires only) and, as cpu leases, those held in
// the rows of claimed and running jobs (liveJobLease).
func (e Executor) LeaseCountActive(ctx context.Context) (map[store.LeaseMode]int64, error) {
	rows, err := e.r.QueryContext(ctx,
		"SELECT mode, COUNT(*) FROM orchestrator_leases WHERE status = ? GROUP BY mode", string(store.LeaseActive))
	if err != nil {
		return nil, fmt.Errorf("count active leases: %w", e.d.MapErr(err))
	}
	defer rows.Close()
	out := map[store.LeaseMode]int64{}
	for rows.Next() {
		var (
			mode string
			n    int64
		)
		if err := rows.Scan(&mode, &n); err != nil {
			return nil, fmt.Errorf("count active leases: %w", err)
		}
		out[store.LeaseMode(mode)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count active leases: %w", e.d.MapErr(err))
	}
	inRows, err := QueryColumn[int64](ctx, e.d, e.r, "SELECT COUNT(*) FROM orchestrator_jobs WHERE "+liveJobLease)
	if err != nil {
		return nil, fmt.Errorf("count active leases in job rows: %w", err)
	}
	if len(inRows) == 1 && inRows[0] > 0 {
		out[store.LeaseCPU] += inRows[0]
	}
	return out, nil
}
