package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// leaderTouchLockWait is how long (whole seconds, MariaDB's unit) LeaderTouch waits for the
// row's exclusive lock. The server default (50 s) would be harmful: a client that gave up
// leaves its statement queued on the server, and a queued exclusive request makes every new
// shared request (the leader's own fenced transactions) wait behind it.
const leaderTouchLockWait = 1

// LeaderAcquire increments the term and records leaderID, acquired_at and renewed_at in one
// UPDATE. The new term comes back through LAST_INSERT_ID(expr), which the server reports in
// the statement's OK packet: no second statement, so nothing can slip in between the
// increment and reading it, even outside a transaction.
func (e executor) LeaderAcquire(ctx context.Context, leaderID string, now time.Time) (int64, error) {
	now = dbTime(now)
	res, err := e.q.ExecContext(ctx, `UPDATE leader_state
		SET term = LAST_INSERT_ID(term + 1), leader_id = ?, acquired_at = ?, renewed_at = ?
		WHERE id = 1`, leaderID, now, now)
	if err != nil {
		return 0, fmt.Errorf("acquire leadership term: %w", mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("acquire leadership term: %w", err)
	}
	if n == 0 {
		return 0, fmt.Errorf("acquire leadership term: leader_state has no row (are migrations applied?): %w",
			store.ErrNotFound)
	}
	term, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("acquire leadership term: %w", err)
	}
	return term, nil
}

// LeaderTouch sets renewed_at while term is current. The lock wait is bounded per statement
// (MariaDB's SET STATEMENT), see leaderTouchLockWait; with clientFoundRows a matched row
// counts even when renewed_at does not change, so zero rows means the term moved on.
func (e executor) LeaderTouch(ctx context.Context, term int64, now time.Time) error {
	return shared.LeaderTouch(ctx, e.q, fmt.Sprintf("SET STATEMENT innodb_lock_wait_timeout = %d FOR "+
		"UPDATE leader_state SET renewed_at = ? WHERE id = 1 AND term = ?", leaderTouchLockWait), term, now)
}
