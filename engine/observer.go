package engine

import (
	"context"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// JobChange is one committed change of a job's status, as an Observer sees it.
type JobChange struct {
	JobID string
	Type  string
	// From is the status before; empty for a submit (a new job: pending, or waiting or
	// awaiting_approval for a job of a flow).
	From store.JobStatus
	To   store.JobStatus
	// At is when the change was made (the engine clock).
	At time.Time
	// Wait is set on a start (claimed → running): the time since the job became available
	// (its submit, for a first attempt; the end of its backoff, for a retry).
	Wait time.Duration
	// Run is set when a run ends (running → done, failed or cancelled): the time since the
	// start.
	Run time.Duration
	// GPU says the job needs GPUs; Placed is set on its claim (pending → claimed, its GPUs
	// leased): the time since the job became available, as Wait.
	GPU    bool
	Placed time.Duration
}

// Observer is told about every job status change after its transaction commits, in commit
// order per transaction; a transaction that rolls back (or is retried) reports nothing for the
// attempts that did not commit. It is called on the hot path: it must not block. The job
// metrics (Metrics) implement it.
type Observer interface {
	ObserveJobs(changes []JobChange)
}

// observedStore reports the job changes of committed transactions to an Observer. The engine
// wraps its store in it, so that every transaction of every engine operation is observed
// without each operation knowing; transition records into the observedTx it is given. It also
// wakes the flows' resolver once a transaction that ended a job other jobs wait for commits
// (store.FlowHasDependents, a bit of the row the transition read: no statement of its own).
type observedStore struct {
	store.Store
	obs Observer // nil: none
	// wake is called after a commit that ended a job with dependents (nil: none).
	wake func()
}

// WithTx runs fn with a recording transaction and reports what it recorded once it commits.
func (s *observedStore) WithTx(ctx context.Context, fn func(store.Tx) error) error {
	var (
		changes []JobChange
		ended   bool
	)
	err := s.Store.WithTx(ctx, func(tx store.Tx) error {
		otx := &observedTx{Tx: tx}
		err := fn(otx)
		changes, ended = otx.changes, otx.dependedOnEnded // only the last (committing) attempt counts
		return err
	})
	if err == nil && len(changes) > 0 && s.obs != nil {
		s.obs.ObserveJobs(changes)
	}
	if err == nil && ended && s.wake != nil {
		s.wake()
	}
	return err
}

// observedTx is a transaction that records job changes.
type observedTx struct {
	store.Tx
	changes []JobChange
	// dependedOnEnded: a job other jobs wait for ended in this transaction.
	dependedOnEnded bool
}

// JobInsert records a submit: a job that was inserted (not one that existed).
func (t *observedTx) JobInsert(ctx context.Context, p store.JobInsertParams) (store.Job, bool, error) {
	j, inserted, err := t.Tx.JobInsert(ctx, p)
	if err == nil && inserted {
		t.changes = append(t.changes, JobChange{JobID: j.ID, Type: j.Type, To: j.Status, At: p.Now})
	}
	return j, inserted, err
}

// JobInsertMany records the submits of a batch insert (all of its jobs are new).
func (t *observedTx) JobInsertMany(ctx context.Context, ps []store.JobInsertParams) ([]store.Job, error) {
	jobs, err := t.Tx.JobInsertMany(ctx, ps)
	if err == nil {
		for i, j := range jobs {
			t.changes = append(t.changes, JobChange{JobID: j.ID, Type: j.Type, To: j.Status, At: ps[i].Now})
		}
	}
	return jobs, err
}

// recordTransition notes a transition of j from → j.Status when tx records them.
func recordTransition(tx store.Executor, from store.JobStatus, j *store.Job, at time.Time) {
	otx, ok := tx.(*observedTx)
	if !ok {
		return
	}
	if j.Flow.Has(store.FlowHasDependents) && j.Status.Terminal() {
		otx.dependedOnEnded = true
	}
	c := JobChange{JobID: j.ID, Type: j.Type, From: from, To: j.Status, At: at, GPU: j.GPUMemoryMB > 0}
	switch {
	case j.Status == store.JobClaimed && c.GPU && !j.AvailableAt.IsZero():
		c.Placed = max(at.Sub(j.AvailableAt), 0)
	case j.Status == store.JobRunning && !j.AvailableAt.IsZero():
		c.Wait = max(at.Sub(j.AvailableAt), 0)
	case from == store.JobRunning && j.StartedAt != nil:
		c.Run = max(at.Sub(*j.StartedAt), 0)
	}
	otx.changes = append(otx.changes, c)
}
