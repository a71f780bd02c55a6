package store

import (
	"context"
	"errors"
	"time"
)

// ErrFenced means a leader-only write carried a leadership term that is no longer the current
// one: another instance has been elected since, and the caller must stop acting as leader.
var ErrFenced = errors.New("store: fenced: leadership term is stale")

// LeaderState is the row of leader_state: who acquired the current leadership term, and when
// it last confirmed that it still holds the lock. It is what /status shows.
type LeaderState struct {
	// Term counts leadership acquisitions; 0 means no instance was ever elected.
	Term int64
	// LeaderID is the instance id of the leader of Term ("" before the first election).
	LeaderID string
	// AcquiredAt is when Term was acquired (zero before the first election).
	AcquiredAt time.Time
	// RenewedAt is the leader's last successful check (zero before the first election). A
	// RenewedAt far in the past means the leader of Term is gone and none has been elected yet.
	RenewedAt time.Time
}

// LeaderExecutor is the operations on leader_state, the single row that numbers leadership
// terms, so that leader-only writes can be fenced.
//
// Mutual exclusion itself comes from elsewhere (a MariaDB GET_LOCK, or a file lock in embedded
// mode); the term only makes a stale leader harmless. The elector calls LeaderAcquire right
// after it won the lock, and every leader-only write runs LeaderCheckTerm with that term in
// its own transaction.
type LeaderExecutor interface {
	// LeaderAcquire increments the term and records leaderID as its leader, with acquired_at
	// and renewed_at set to now, in one statement; it returns the new term. Two concurrent
	// calls always get distinct terms.
	//
	// The increment takes an exclusive lock on the row, so it waits until every transaction
	// that passed LeaderCheckTerm (and still holds its shared lock) has committed or rolled
	// back: once LeaderAcquire returns, no write fenced by an older term can commit.
	LeaderAcquire(ctx context.Context, leaderID string, now time.Time) (term int64, err error)

	// LeaderGet returns the row (ErrNotFound when the migration that inserts it did not run).
	LeaderGet(ctx context.Context) (LeaderState, error)

	// LeaderTouch sets renewed_at to now while term is still current, and returns ErrFenced
	// when the term has moved on. It needs the row's exclusive lock, so a driver bounds its
	// wait (about a second): a touch must never queue for long in front of the leader's own
	// fenced transactions. A lock wait timeout is an error the elector logs and retries.
	LeaderTouch(ctx context.Context, term int64, now time.Time) error

	// LeaderCheckTerm is the fencing primitive of leader-only writes: it returns ErrFenced
	// unless term is the current term. It is only meaningful inside a transaction (Store.WithTx),
	// which it joins by reading the row with a shared lock (SELECT ... LOCK IN SHARE MODE)
	// that is held until the transaction ends.
	//
	// Why that is enough: LeaderAcquire's increment needs the exclusive lock on the same row,
	// so a new leader's increment waits until every transaction that has already passed the
	// check commits or rolls back; and a check that runs after the increment committed reads
	// the new term (a locking read sees the latest committed version, not the transaction's
	// snapshot) and fails. Hence a fenced transaction that commits did so while its term was
	// current, wherever in the transaction the check ran. Checking first wastes no work when
	// fenced; checking last holds the shared lock for the shortest time.
	LeaderCheckTerm(ctx context.Context, term int64) error
}
