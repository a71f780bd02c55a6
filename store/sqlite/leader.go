package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// leaderTouchWait bounds how long LeaderTouch waits for the writer connection, as the MariaDB
// driver bounds its lock wait: a touch must never queue for long in front of the leader's own
// fenced transactions, and the elector retries a touch that timed out.
const leaderTouchWait = time.Second

// LeaderAcquire increments the term and records leaderID, acquired_at and renewed_at in one
// UPDATE ... RETURNING: nothing can slip in between the increment and reading it, and the
// write waits for every transaction in progress (each holds the database's write lock), so no
// write fenced by an older term can commit after it.
func (e executor) LeaderAcquire(ctx context.Context, leaderID string, now time.Time) (int64, error) {
	at := dbTime(now)
	var term int64
	err := e.w.QueryRowContext(ctx, `UPDATE leader_state
		SET term = term + 1, leader_id = ?, acquired_at = ?, renewed_at = ?
		WHERE id = 1 RETURNING term`, leaderID, at, at).Scan(&term)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("acquire leadership term: leader_state has no row (are migrations applied?): %w",
			store.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("acquire leadership term: %w", mapErr(err))
	}
	return term, nil
}

// LeaderGet reads the row; NULL columns (no leader yet) come back as zero values.
func (e executor) LeaderGet(ctx context.Context) (store.LeaderState, error) {
	var (
		ls                store.LeaderState
		leaderID          sql.NullString
		acquired, renewed dbTimeScan
	)
	err := e.r.QueryRowContext(ctx, `SELECT term, leader_id, acquired_at, renewed_at
		FROM leader_state WHERE id = 1`).Scan(&ls.Term, &leaderID, &acquired, &renewed)
	if err != nil {
		return store.LeaderState{}, fmt.Errorf("get leader state: %w", mapErr(err))
	}
	ls.LeaderID = leaderID.String
	ls.AcquiredAt, ls.RenewedAt = acquired.t, renewed.t
	return ls, nil
}

// LeaderTouch sets renewed_at while term is current. Its wait for the writer connection (and
// so for the transactions ahead of it) is bounded by leaderTouchWait; zero matched rows means
// the term moved on.
func (e executor) LeaderTouch(ctx context.Context, term int64, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, leaderTouchWait)
	defer cancel()
	res, err := e.w.ExecContext(ctx,
		"UPDATE leader_state SET renewed_at = ? WHERE id = 1 AND term = ?", dbTime(now), term)
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

// LeaderCheckTerm reads the term. Inside WithTx no lock needs taking: the transaction holds
// the database's write lock until it ends, so no LeaderAcquire can commit meanwhile (see
// store.LeaderExecutor for why that fences). Outside a transaction it is only a snapshot.
func (e executor) LeaderCheckTerm(ctx context.Context, term int64) error {
	var current int64
	err := e.r.QueryRowContext(ctx, "SELECT term FROM leader_state WHERE id = 1").Scan(&current)
	if err != nil {
		return fmt.Errorf("check leadership term %d: %w", term, mapErr(err))
	}
	if current != term {
		return fmt.Errorf("check leadership term %d (current %d): %w", term, current, store.ErrFenced)
	}
	return nil
}
