package mysql

import (
	"context"
	"database/sql"
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

// LeaderGet reads the row; NULL columns (no leader yet) come back as zero values.
func (e executor) LeaderGet(ctx context.Context) (store.LeaderState, error) {
	var (
		ls                store.LeaderState
		leaderID          sql.NullString
		acquired, renewed sql.NullTime
	)
	err := e.q.QueryRowContext(ctx, `SELECT term, leader_id, acquired_at, renewed_at
		FROM leader_state WHERE id = 1`).Scan(&ls.Term, &leaderID, &acquired, &renewed)
	if err != nil {
		return store.LeaderState{}, fmt.Errorf("get leader state: %w", mapErr(err))
	}
	ls.LeaderID = leaderID.String
	if acquired.Valid {
		ls.AcquiredAt = acquired.Time
	}
	if renewed.Valid {
		ls.RenewedAt = renewed.Time
	}
	return ls, nil
}

// LeaderTouch sets renewed_at while term is current. The lock wait is bounded per statement
// (MariaDB's SET STATEMENT), see leaderTouchLockWait; with clientFoundRows a matched row
// counts even when renewed_at does not change, so zero rows means the term moved on.
func (e executor) LeaderTouch(ctx context.Context, term int64, now time.Time) error {
	res, err := e.q.ExecContext(ctx, fmt.Sprintf(
		"SET STATEMENT innodb_lock_wait_timeout = %d FOR UPDATE leader_state SET renewed_at = ? WHERE id = 1 AND term = ?",
		leaderTouchLockWait), dbTime(now), term)
	if err != nil {
		return fmt.Errorf("touch leadership term %d: %w", term, mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("touch leadership term %d: %w", term, err)
	}
	if n == 0 {
		return fmt.Errorf("touch leadership term %d: %w", term, store.ErrFenced)
	}
	return nil
}

// LeaderCheckTerm reads the term with a shared lock, which the enclosing transaction holds
// until it ends (see store.LeaderExecutor for why that fences). Outside a transaction the lock
// ends with the statement and the check is only a snapshot.
func (e executor) LeaderCheckTerm(ctx context.Context, term int64) error {
	var current int64
	err := e.q.QueryRowContext(ctx,
		"SELECT term FROM leader_state WHERE id = 1 LOCK IN SHARE MODE").Scan(&current)
	if err != nil {
		return fmt.Errorf("check leadership term %d: %w", term, mapErr(err))
	}
	if current != term {
		return fmt.Errorf("check leadership term %d (current %d): %w", term, current, store.ErrFenced)
	}
	return nil
}
