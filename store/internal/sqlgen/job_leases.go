package sqlgen

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// liveJobLease selects the claimed and running jobs that hold a lease in their row: the status
// range of idx_jobs_dispatch (bounded by the jobs in flight, not by the backlog), then the row.
var liveJobLease = liveJobLeaseOf("")

// liveJobLeaseOf is liveJobLease with its columns qualified by alias ("j.").
func liveJobLeaseOf(alias string) string {
	return alias + `status IN ('claimed', 'running') AND ` + alias + `lease_expires_at IS NOT NULL
	AND SUBSTR(` + alias + `lease_token, 1, 3) = '` + store.JobLeaseTokenPrefix + `'`
}

// JobLeaseHeartbeat implements store.LeaseExecutor: one UPDATE by primary key per chunk, then
// the rows.
func (e Executor) JobLeaseHeartbeat(ctx context.Context, ids, tokens []string, until, now time.Time) ([]store.Job, error) {
	ids, tokens = DistinctIDs(ids), DistinctIDs(tokens)
	if len(ids) == 0 || len(tokens) == 0 {
		return nil, nil
	}
	chunk := max(e.d.Chunk, 1)
	for i := 0; i < len(ids); i += chunk {
		ids := ids[i:min(i+chunk, len(ids))]
		// The tokens of these jobs' leases are among tokens; the job's own token check is
		// what guards, so the whole list goes with every chunk only when it is short.
		toks := tokens
		if len(tokens) > chunk {
			toks = tokensOf(tokens, ids)
		}
		args := slices.Concat([]any{e.d.Time(until)}, Args(ids), Args(toks), []any{e.d.Time(now)})
		_, err := e.w.ExecContext(ctx, `UPDATE `+e.d.table("orchestrator_jobs")+` SET lease_expires_at = ?
			WHERE job_id IN (`+Placeholders(len(ids))+`) AND lease_token IN (`+Placeholders(len(toks))+`)
			AND status IN ('claimed', 'running') AND lease_expires_at > ?`, args...)
		if err != nil {
			return nil, fmt.Errorf("heartbeat job leases: %w", e.d.MapErr(err))
		}
	}
	jobs, err := chunked(ids, e.d.Chunk, func(chunk []string) ([]store.Job, error) {
		return e.d.QueryJobs(ctx, e.w, "SELECT "+JobColumnsNoPayload+" FROM orchestrator_jobs WHERE job_id IN ("+
			Placeholders(len(chunk))+")", Args(chunk)...)
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat job leases: %w", err)
	}
	return jobs, nil
}

// tokensOf returns the tokens among tokens that name one of ids (store.JobLeaseTokenPrefix,
// 32 hex digits, "_", the job id).
func tokensOf(tokens, ids []string) []string {
	var out []string
	for _, t := range tokens {
		if i := len(store.JobLeaseTokenPrefix) + 33; len(t) > i && slices.Contains(ids, t[i:]) {
			out = append(out, t)
		}
	}
	if out == nil {
		out = []string{""} // matches no lease
	}
	return out
}

// JobLeasesExpired implements store.LeaseExecutor.
func (e Executor) JobLeasesExpired(ctx context.Context, now time.Time, limit int) ([]store.Job, error) {
	jobs, err := e.d.QueryJobs(ctx, e.r, "SELECT "+JobColumnsNoPayload+" FROM orchestrator_jobs WHERE "+liveJobLease+
		" AND lease_expires_at <= ? ORDER BY lease_expires_at, job_id LIMIT ?",
		e.d.Time(now), ClampLimit(limit, DispatchLimitDefault, DispatchLimitMax))
	if err != nil {
		return nil, fmt.Errorf("list expired job leases: %w", err)
	}
	return jobs, nil
}
