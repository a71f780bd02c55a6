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

// LeaderTouch sets renewed_at while term is current. Its wait for the writer connection (and
// so for the transactions ahead of it) is bounded by leaderTouchWait; zero matched rows means
// the term moved on.
func (e executor) LeaderTouch(ctx context.Context, term int64, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, leaderTouchWait)
	defer cancel()
	return shared.LeaderTouch(ctx, e.w, "UPDATE leader_state SET renewed_at = ? WHERE id = 1 AND term = ?", term, now)
}
