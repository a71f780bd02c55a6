package sqlgen

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of the leader row that both dialects share
// (store.LeaderExecutor). Acquiring differs: each dialect reads the new term back its own way.

// LeaderGet reads the row; NULL columns (no leader yet) come back as zero values.
func (e Executor) LeaderGet(ctx context.Context) (store.LeaderState, error) {
	var (
		ls       store.LeaderState
		leaderID sql.NullString
	)
	err := e.r.QueryRowContext(ctx, `SELECT term, leader_id, acquired_at, renewed_at
		FROM leader_state WHERE id = 1`).Scan(&ls.Term, &leaderID, e.d.at(&ls.AcquiredAt), e.d.at(&ls.RenewedAt))
	if err != nil {
		return store.LeaderState{}, fmt.Errorf("get leader state: %w", e.d.MapErr(err))
	}
	ls.LeaderID = leaderID.String
	return ls, nil
}

// LeaderCheckTerm reads the term with a shared lock (Dialect.ShareLock), which the enclosing
// transaction holds until it ends (see store.LeaderExecutor for why that fences); where the
// dialect takes none (SQLite), the transaction holds the database's write lock, so no
// LeaderAcquire can commit meanwhile. Outside a transaction the check is only a snapshot.
func (e Executor) LeaderCheckTerm(ctx context.Context, term int64) error {
	var current int64
	err := e.r.QueryRowContext(ctx, "SELECT term FROM leader_state WHERE id = 1"+e.d.ShareLock).Scan(&current)
	if err != nil {
		return fmt.Errorf("check leadership term %d: %w", term, e.d.MapErr(err))
	}
	if current != term {
		return fmt.Errorf("check leadership term %d (current %d): %w", term, current, store.ErrFenced)
	}
	return nil
}

// LeaderTouch runs q on x: the driver's UPDATE of renewed_at (its first argument, now) while
// term (its second) is current, whose wait the driver bounds its own way. A matched row counts
// even when renewed_at does not change, so no row means the term moved on: store.ErrFenced.
func (d *Driver) LeaderTouch(ctx context.Context, x Execer, q string, term int64, now time.Time) error {
	n, err := d.ExecCount(ctx, x, fmt.Sprintf("touch leadership term %d", term), q, d.Time(now), term)
	if err == nil && n == 0 {
		err = fmt.Errorf("touch leadership term %d: %w", term, store.ErrFenced)
	}
	return err
}
