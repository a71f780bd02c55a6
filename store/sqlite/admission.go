package sqlite

import (
	"context"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

const admissionColumns = "agent, rate_per_sec, burst, max_pending, enabled, updated_at"

// AdmissionPolicyUpsert inserts or replaces the policy of p.Agent (INSERT … ON CONFLICT DO
// UPDATE) on the writer connection.
func (e executor) AdmissionPolicyUpsert(ctx context.Context, p store.AdmissionPolicy) (store.AdmissionPolicy, error) {
	_, err := e.w.ExecContext(ctx, `INSERT INTO admission_policies (`+admissionColumns+`)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (agent) DO UPDATE SET rate_per_sec = excluded.rate_per_sec, burst = excluded.burst,
			max_pending = excluded.max_pending, enabled = excluded.enabled, updated_at = excluded.updated_at`,
		p.Agent, p.RatePerSec, p.Burst, p.MaxPending, p.Enabled, dbTime(p.UpdatedAt))
	if err != nil {
		return store.AdmissionPolicy{}, fmt.Errorf("set admission policy of %s: %w", p.Agent, mapErr(err))
	}
	p.UpdatedAt = truncTime(p.UpdatedAt)
	return p, nil
}

// AdmissionPolicyGet returns the policy of agent, or store.ErrNotFound. Inside a transaction
// it reads through the transaction (e.r is the transaction there).
func (e executor) AdmissionPolicyGet(ctx context.Context, agent string) (store.AdmissionPolicy, error) {
	row := e.r.QueryRowContext(ctx, "SELECT "+admissionColumns+" FROM admission_policies WHERE agent = ?", agent)
	p, err := scanAdmissionPolicy(row)
	if err != nil {
		return store.AdmissionPolicy{}, fmt.Errorf("get admission policy of %s: %w", agent, mapErr(err))
	}
	return p, nil
}

// AdmissionPolicyList returns every policy, ordered by agent.
func (e executor) AdmissionPolicyList(ctx context.Context) ([]store.AdmissionPolicy, error) {
	rows, err := e.r.QueryContext(ctx, "SELECT "+admissionColumns+" FROM admission_policies ORDER BY agent")
	if err != nil {
		return nil, fmt.Errorf("list admission policies: %w", mapErr(err))
	}
	defer rows.Close()
	var out []store.AdmissionPolicy
	for rows.Next() {
		p, err := scanAdmissionPolicy(rows)
		if err != nil {
			return nil, fmt.Errorf("list admission policies: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list admission policies: %w", mapErr(err))
	}
	return out, nil
}

// AdmissionPolicyDelete deletes the policy of agent; store.ErrNotFound when it has none.
func (e executor) AdmissionPolicyDelete(ctx context.Context, agent string) error {
	res, err := e.w.ExecContext(ctx, "DELETE FROM admission_policies WHERE agent = ?", agent)
	if err != nil {
		return fmt.Errorf("delete admission policy of %s: %w", agent, mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete admission policy of %s: %w", agent, err)
	}
	if n == 0 {
		return fmt.Errorf("delete admission policy of %s: %w", agent, store.ErrNotFound)
	}
	return nil
}

// JobCountUnfinished counts the agent's non-terminal jobs over idx_jobs_agent_status, stopping
// the scan at limit rows (see store.AdmissionExecutor).
func (e executor) JobCountUnfinished(ctx context.Context, agent string, limit int) (int, error) {
	statuses := store.UnfinishedJobStatuses()
	args := append([]any{agent}, sqlgen.Args(statuses)...)
	inner := "SELECT 1 FROM orchestrator_jobs WHERE agent = ? AND status IN (" + sqlgen.Placeholders(len(statuses)) + ")"
	if limit > 0 {
		inner += " LIMIT ?"
		args = append(args, limit)
	}
	var n int
	if err := e.r.QueryRowContext(ctx, "SELECT COUNT(*) FROM ("+inner+")", args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count unfinished jobs of agent %s: %w", agent, mapErr(err))
	}
	return n, nil
}

// JobCountPending counts the pending jobs of each of types over idx_jobs_type_status, less
// those of excludeIDs.
func (e executor) JobCountPending(ctx context.Context, types, excludeIDs []string) (map[string]int, error) {
	return shared.JobCountPending(ctx, e.r, types, excludeIDs)
}

func scanAdmissionPolicy(row scanner) (store.AdmissionPolicy, error) {
	var (
		p       store.AdmissionPolicy
		updated dbTimeScan
	)
	if err := row.Scan(&p.Agent, &p.RatePerSec, &p.Burst, &p.MaxPending, &p.Enabled, &updated); err != nil {
		return store.AdmissionPolicy{}, err
	}
	p.UpdatedAt = updated.t
	return p, nil
}
