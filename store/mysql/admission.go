package mysql

import (
	"context"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

const admissionColumns = "agent, rate_per_sec, burst, max_pending, enabled, updated_at"

// AdmissionPolicyUpsert inserts or replaces the policy of p.Agent (INSERT … ON DUPLICATE KEY
// UPDATE: one statement, no read first, so concurrent writers of one agent cannot deadlock).
func (e executor) AdmissionPolicyUpsert(ctx context.Context, p store.AdmissionPolicy) (store.AdmissionPolicy, error) {
	p.UpdatedAt = dbTime(p.UpdatedAt)
	_, err := e.q.ExecContext(ctx, `INSERT INTO admission_policies (`+admissionColumns+`)
		VALUES (?, ?, ?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE rate_per_sec = VALUES(rate_per_sec), burst = VALUES(burst),
			max_pending = VALUES(max_pending), enabled = VALUES(enabled), updated_at = VALUES(updated_at)`,
		p.Agent, p.RatePerSec, p.Burst, p.MaxPending, p.Enabled, p.UpdatedAt)
	if err != nil {
		return store.AdmissionPolicy{}, fmt.Errorf("set admission policy of %s: %w", p.Agent, mapErr(err))
	}
	return p, nil
}

// AdmissionPolicyGet returns the policy of agent, or store.ErrNotFound.
func (e executor) AdmissionPolicyGet(ctx context.Context, agent string) (store.AdmissionPolicy, error) {
	row := e.q.QueryRowContext(ctx, "SELECT "+admissionColumns+" FROM admission_policies WHERE agent = ?", agent)
	p, err := scanAdmissionPolicy(row)
	if err != nil {
		return store.AdmissionPolicy{}, fmt.Errorf("get admission policy of %s: %w", agent, mapErr(err))
	}
	return p, nil
}

// AdmissionPolicyList returns every policy, ordered by agent.
func (e executor) AdmissionPolicyList(ctx context.Context) ([]store.AdmissionPolicy, error) {
	rows, err := e.q.QueryContext(ctx, "SELECT "+admissionColumns+" FROM admission_policies ORDER BY agent")
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
	res, err := e.q.ExecContext(ctx, "DELETE FROM admission_policies WHERE agent = ?", agent)
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

// JobCountUnfinished counts the agent's non-terminal jobs over idx_jobs_agent_status. The
// LIMIT inside the derived table stops the index scan at limit entries, so a cap of 1000 costs
// at most 1000 index reads however many jobs the agent has.
func (e executor) JobCountUnfinished(ctx context.Context, agent string, limit int) (int, error) {
	statuses := store.UnfinishedJobStatuses()
	args := append([]any{agent}, sqlgen.Args(statuses)...)
	inner := "SELECT 1 FROM orchestrator_jobs WHERE agent = ? AND status IN (" + sqlgen.Placeholders(len(statuses)) + ")"
	if limit > 0 {
		inner += " LIMIT ?"
		args = append(args, limit)
	}
	var n int
	if err := e.q.QueryRowContext(ctx, "SELECT COUNT(*) FROM ("+inner+") AS unfinished", args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count unfinished jobs of agent %s: %w", agent, mapErr(err))
	}
	return n, nil
}

// JobCountPending counts the pending jobs of each of types over idx_jobs_type_status, less
// those of excludeIDs.
func (e executor) JobCountPending(ctx context.Context, types, excludeIDs []string) (map[string]int, error) {
	return shared.JobCountPending(ctx, e.q, types, excludeIDs)
}

func scanAdmissionPolicy(row scanner) (store.AdmissionPolicy, error) {
	var p store.AdmissionPolicy
	err := row.Scan(&p.Agent, &p.RatePerSec, &p.Burst, &p.MaxPending, &p.Enabled, &p.UpdatedAt)
	return p, err
}
