// Package store defines the persistence boundary of the orchestrator: the models, the Store
// interface every driver implements, and the sentinel errors drivers map their errors to.
//
// The database is the truth, and Redis only the delivery: every job state lives here, so a
// lost Redis loses no job, and every transition is written together with its audit row inside
// one transaction (WithTx), so the record cannot disagree with the state.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Sentinel errors. Drivers translate their own errors into these at the boundary so that callers
// never inspect driver-specific error types.
var (
	// ErrNotFound means the addressed row does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict means a compare-and-set lost (the row changed underneath) or a unique key clashed.
	ErrConflict = errors.New("store: conflict")
	// ErrUnavailable means the database could not serve the call now, whatever the call was:
	// unreachable, a broken connection, too many connections, shutting down, or its locks held
	// past the driver's own retries (a deadlock, a lock wait timeout, SQLite busy or locked).
	// The same call may succeed later; the API answers 503. Drivers mark their errors with
	// Unavailable.
	ErrUnavailable = errors.New("store: unavailable")
)

// Unavailable marks err as ErrUnavailable: errors.Is(Unavailable(err), ErrUnavailable) holds,
// and err stays in the chain with its message unchanged, for logs and for errors.As. nil and
// an error already marked are returned as they are.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err: err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// JobStatus is the state of a job. The allowed transitions live in engine (one table).
type JobStatus string

// Job states (docs/architecture.md, "Job states").
const (
	JobPending    JobStatus = "pending"
	JobClaimed    JobStatus = "claimed"
	JobRunning    JobStatus = "running"
	JobDone       JobStatus = "done"
	JobFailed     JobStatus = "failed"
	JobDeadLetter JobStatus = "dead_letter"
	JobCancelled  JobStatus = "cancelled"
	// JobWaiting is a job that waits for other jobs to end (its parents, or a fan-out
	// parent's children): never dispatched; the leader's resolver moves it on.
	JobWaiting JobStatus = "waiting"
	// JobAwaitingApproval is a job an approval policy holds until a person approves it (or
	// rejects it, or its request expires): never dispatched.
	JobAwaitingApproval JobStatus = "awaiting_approval"
)

// JobStatuses lists every job state, in lifecycle order.
var JobStatuses = []JobStatus{JobAwaitingApproval, JobWaiting, JobPending, JobClaimed, JobRunning, JobDone, JobFailed,
	JobDeadLetter, JobCancelled}

// Terminal reports whether no further transition is expected (dead_letter can still be replayed
// by an operator, but nothing automatic moves it).
func (s JobStatus) Terminal() bool {
	return s == JobDone || s == JobDeadLetter || s == JobCancelled
}

// Valid reports whether s is one of the known states.
func (s JobStatus) Valid() bool {
	for _, v := range JobStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// JobHolder is who holds a job: its status and the worker of its attempt ("" when none).
type JobHolder struct {
	ID       string
	Status   JobStatus
	WorkerID string
}

// Job is one row of orchestrator_jobs.
type Job struct {
	ID          string
	Type        string
	Agent       string
	Payload     json.RawMessage
	Status      JobStatus
	Attempts    int // attempts started so far (incremented at claim)
	MaxAttempts int
	AvailableAt time.Time // not delivered before
	Enqueued    bool      // outbox flag: published to the stream for the current attempt
	StreamID    string    // the stream entry of the last publication
	OwnerPool   string
	WorkerID    string
	LeaseToken  string
	GPUMemoryMB int // GPU memory the job needs on each of its GPUs; 0 = CPU job
	// GPUs is how many GPUs of one node the job needs (GPUCount reads it).
	GPUs int
	// GPUExclusive asks for GPUs that nothing else is placed on while the job holds them.
	GPUExclusive bool
	// Priority is 0..9, higher first among GPU jobs waiting for room.
	Priority int
	// WaitingReason is why the pending job was last refused a place (a claim's lease denial:
	// "no_capacity: …"); empty when none. A claim clears it.
	WaitingReason string
	// PlacedNode is where the scheduler placed the pending job (a Target: the node, or
	// "<node>@<pool>" for a job routed to a pool): its LeaseToken names the lease that
	// reserves its room there, and its entry is in that target's stream. "" when the job is
	// not placed; every write of LeaseToken writes it too.
	PlacedNode string
	// Constraints narrow the nodes the job may run on; nil when it has none.
	Constraints *Constraints
	// PoolID routes the job to the workers of one pool, ModelID to those of a pool serving
	// the model; "" for any.
	PoolID, ModelID string
	Timeout         time.Duration
	Result          json.RawMessage
	LastError       string
	CreatedAt       time.Time
	UpdatedAt       time.Time
	StartedAt       *time.Time
	FinishedAt      *time.Time
	// LeaseExpiresAt is the expiry of the lease a job without a GPU holds in its own row
	// (LeaseToken a leases.NewJobToken token): renewed by its worker's heartbeats, rescued by
	// the lease purger once past. nil when the job never held one; stale once LeaseToken is
	// cleared.
	LeaseExpiresAt *time.Time

	// CallbackURL is where the job's terminal event (done, dead_letter, cancelled) is POSTed;
	// "" for none (docs/architecture.md, "Webhooks").
	CallbackURL string
	// Flow says what the job takes part in (depends_on, a fan-out, an approval); 0 for a plain
	// job, which pays nothing for them (store/flows.go).
	Flow JobFlow
}

// JobInsertParams are the fields of a new job; the driver sets status pending (or Status),
// enqueued false, attempts 0 and the timestamps to Now.
type JobInsertParams struct {
	ID string
	// Status is the new job's status: "" (pending), or waiting or awaiting_approval for a job
	// of a flow (store/flows.go).
	Status       JobStatus
	Type         string
	Agent        string
	Payload      json.RawMessage
	MaxAttempts  int
	AvailableAt  time.Time
	GPUMemoryMB  int
	GPUs         int
	GPUExclusive bool
	Priority     int
	Constraints  *Constraints
	PoolID       string
	ModelID      string
	Timeout      time.Duration
	Now          time.Time

	// CallbackURL is the job's callback ("" for none).
	CallbackURL string
}

// GPUCount is how many GPUs j needs: 0 for a CPU job, and at least one for a GPU job (rows
// written before jobs named a count have GPUs 0).
func (j *Job) GPUCount() int {
	if j.GPUMemoryMB <= 0 {
		return 0
	}
	return max(j.GPUs, 1)
}

// Scheduled reports whether the leader's scheduler places j (when it runs): a GPU job, a job
// with constraints, or one routed to a pool or a model. Such a job is published to the stream
// of the node (and pool) it is placed on, never to its type's.
func (j *Job) Scheduled() bool {
	return j.GPUMemoryMB > 0 || !j.Constraints.Empty() || j.PoolID != "" || j.ModelID != ""
}

// DispatchParams selects the jobs the dispatcher publishes: pending, not enqueued, available at
// or before Now, and, for a job never attempted, created at or before SubmittedBy (zero: any).
// A submit publishes its own jobs once they have committed, and marks them a moment later;
// SubmittedBy keeps the dispatcher from publishing them a second time meanwhile.
type DispatchParams struct {
	Now         time.Time
	SubmittedBy time.Time
	Limit       int
	// Scheduled leaves out the jobs the scheduler places (Job.Scheduled) and has not placed:
	// the scheduler publishes those, to the stream of the node it places them on.
	Scheduled bool
}

// SchedulableParams selects the jobs the scheduler may place (Job.Scheduled): pending, not placed, due at
// Now. It reads up to Limit of them by priority (highest first, then oldest) and up to Limit
// oldest first, so that jobs whose priority ages are seen behind a backlog of higher ones, and up
// to Limit GPU jobs by priority, so that a backlog of jobs without a GPU waiting for worker
// slots does not hide them.
type SchedulableParams struct {
	Now   time.Time
	Limit int
}

// JobListParams filters and pages GET /jobs. Pages are ordered by (created_at DESC, job_id DESC);
// After is the keyset cursor: the last job of the previous page.
type JobListParams struct {
	Status JobStatus // empty: any
	Type   string
	Agent  string
	After  *JobCursor
	Limit  int
}

// JobCursor is a keyset position in a job listing.
type JobCursor struct {
	CreatedAt time.Time
	ID        string
}

// JobUpdate is a compare-and-set write of one job. The row is written only while its status is
// still From (and, when ExpectAttempts is set, its attempts equal it); otherwise ErrConflict
// (or ErrNotFound when the job does not exist). Nil pointer fields are left unchanged.
type JobUpdate struct {
	ID             string
	From           JobStatus
	ExpectAttempts *int
	ExpectWorker   *string // only while worker_id equals this

	To          JobStatus
	Attempts    *int
	MaxAttempts *int
	AvailableAt *time.Time
	Enqueued    *bool
	OwnerPool   *string
	WorkerID    *string
	LeaseToken  *string
	// StreamID names the job's live stream entry: a claim sets the entry its worker read,
	// which the job's enqueued mark may not have recorded yet (a Redis recovery looks for it).
	StreamID *string
	// WaitingReason sets the job's waiting reason (a claim clears it).
	WaitingReason *string
	// PlacedNode is written with LeaseToken: nil (or no LeaseToken) clears it, so that only the
	// scheduler's placement of a pending job names a node.
	PlacedNode *string
	Result     json.RawMessage // nil: unchanged
	LastError  *string
	StartedAt  *time.Time // a pointer to the zero time clears it (NULL), e.g. for a retry
	FinishedAt *time.Time // likewise
	// LeaseExpiresAt sets the expiry of the lease the job holds in its row (Job.LeaseExpiresAt).
	LeaseExpiresAt *time.Time
	Now            time.Time // updated_at
}

// JobEnqueued records that a job was published for a given attempt count. The mark applies only
// while the job is still pending, not yet enqueued, and its attempts are unchanged: a stale mark
// must never hide a later retry from the dispatcher.
type JobEnqueued struct {
	ID       string
	Attempts int
	StreamID string
}

// AuditEvent is one row of orchestrator_audit: a transition or an admin action.
type AuditEvent struct {
	ID         int64 // assigned by the database; increases with time
	TS         time.Time
	EventType  string // e.g. "job.pending->claimed", "job.submitted"
	JobID      string
	LeaseToken string
	PoolID     string
	Actor      string // who caused it: "agent:NAME", "worker:ID", "leader", "admin"
	Details    json.RawMessage
}

// AuditDetailCallback is the audit detail (true) that marks the row of a transition that ends a
// job with a callback_url: the row the webhooks' tail delivers to the callback.
const AuditDetailCallback = "callback"

// AuditListParams selects audit rows in id order.
type AuditListParams struct {
	JobID   string // empty: all jobs
	AfterID int64
	Limit   int
}

// Executor is every operation of the store. A Store runs them directly (each in its own implicit
// transaction); a Tx runs them inside one transaction. Each area of the data model has its own
// interface (and file); Executor is their union.
type Executor interface {
	JobExecutor
	AuditExecutor
	LeaderExecutor
	MaintenanceExecutor
	LeaseExecutor
	GPUExecutor
	AdmissionExecutor
	PoolExecutor
	NodeExecutor
	ScheduleExecutor
	WebhookExecutor
	FlowExecutor
	ApprovalExecutor
}

// JobExecutor is the operations on orchestrator_jobs.
type JobExecutor interface {
	// JobInsert inserts a new pending job. When a job with the same ID exists it returns that job
	// and inserted=false, writing nothing.
	JobInsert(ctx context.Context, p JobInsertParams) (job Job, inserted bool, err error)
	// JobInsertMany inserts new pending jobs, all or none: when any id is taken it fails with
	// ErrConflict (and the caller rolls back). It returns the rows as stored, in order. In a
	// transaction a driver may hold the INSERT and send it with the transaction's next
	// statement or its COMMIT (MariaDB: the whole submit is one round trip); a taken id then
	// fails that statement, or the commit, with ErrConflict.
	JobInsertMany(ctx context.Context, ps []JobInsertParams) ([]Job, error)
	// JobGet returns one job or ErrNotFound.
	JobGet(ctx context.Context, id string) (Job, error)
	// JobGetMany returns the jobs that exist among ids (in no particular order); forUpdate locks
	// them for the rest of the transaction (only meaningful in a Tx).
	JobGetMany(ctx context.Context, ids []string, forUpdate bool) ([]Job, error)
	// JobHolders returns who holds each job that exists among ids: its status and worker, without
	// the payload or result (in no particular order, never locking).
	JobHolders(ctx context.Context, ids []string) ([]JobHolder, error)
	// JobList returns a page of jobs, newest first.
	JobList(ctx context.Context, p JobListParams) ([]Job, error)
	// JobUpdate applies one compare-and-set write.
	JobUpdate(ctx context.Context, u JobUpdate) error
	// JobUpdateMany applies compare-and-set writes of distinct jobs in as few statements as it
	// can. Unlike JobUpdate it does not say which write failed: any write whose row moved on
	// fails the whole call with ErrConflict (or ErrNotFound), so it belongs in a transaction whose
	// rows the caller has read and locked.
	JobUpdateMany(ctx context.Context, us []JobUpdate) error
	// JobListDispatchable returns pending jobs with enqueued=0 that are due (see
	// DispatchParams), oldest available first, without their payloads (Payload nil: publishing
	// needs none).
	JobListDispatchable(ctx context.Context, p DispatchParams) ([]Job, error)
	// JobMarkEnqueued sets enqueued=1 and stream_id for each entry that still matches (pending,
	// not enqueued, same attempts); it returns how many rows changed.
	JobMarkEnqueued(ctx context.Context, marks []JobEnqueued) (int, error)
	// JobSetWaiting sets the waiting reason (cut to 255 bytes) of the jobs among ids that are
	// still pending, leaving updated_at as it is: the reason is advice, not a state. It returns
	// how many rows changed.
	JobSetWaiting(ctx context.Context, ids []string, reason string) (int, error)
	// JobCountUnplaced counts, by type, the pending jobs that wait for the scheduler
	// (not placed, not enqueued).
	JobCountUnplaced(ctx context.Context) (map[string]int, error)
	// JobListSchedulable returns the pending jobs the scheduler places that are due and not placed (see
	// SchedulableParams), without their payloads, each once.
	JobListSchedulable(ctx context.Context, p SchedulableParams) ([]Job, error)
	// JobMarkPublished is JobMarkEnqueued for jobs the calling transaction inserted itself: the
	// rows are its own and locked, so every mark matches and nothing is counted. That lets a
	// driver send it with the transaction's next statement or its commit (store/mysql/txconn.go)
	// instead of on a round trip of its own; an error then fails that statement.
	JobMarkPublished(ctx context.Context, marks []JobEnqueued) error
}

// AuditExecutor is the operations on orchestrator_audit.
type AuditExecutor interface {
	// AuditInsert appends audit rows (one multi-row insert).
	AuditInsert(ctx context.Context, events []AuditEvent) error
	// AuditList returns audit rows with id > AfterID, oldest first.
	AuditList(ctx context.Context, p AuditListParams) ([]AuditEvent, error)
}

// Tx is an Executor bound to one open transaction.
type Tx interface {
	Executor
	// DeferChecks lets the transaction's later compare-and-set writes (JobUpdate, JobUpdateMany,
	// LeaseSetStatus, LeaseSetStatusMany) wait for its next round trip instead of taking one
	// each. A write that did not match all its rows then fails a later call, or the commit,
	// with ErrConflict, instead of its own call, and a missing row is not told apart from one
	// that moved on. Call it only once the rows those writes change are locked in this
	// transaction (read for update), so that a mismatch is a bug, never a race the caller
	// handles. A driver may ignore it.
	DeferChecks()
	// LockJobsAndLeases reads and locks (for update) the existing jobs of p.Jobs and leases of
	// p.Leases, jobs first: the lock order of every transaction that writes both. MariaDB sends
	// both reads in one round trip. Empty ids and tokens are skipped, like their GetMany's.
	LockJobsAndLeases(ctx context.Context, p LockParams) ([]Job, []Lease, error)
	// Flush sends the writes a driver holds for the transaction's next round trip (see
	// JobInsertMany) now, so that they have run when it returns: before a step outside the
	// database that must follow them.
	Flush(ctx context.Context) error
}

// LockParams is what Tx.LockJobsAndLeases reads and locks.
type LockParams struct {
	Jobs []string
	// Payloads are the jobs among Jobs whose payload is read (a claim hands it to the worker).
	// The others come with a nil Payload: settling or starting a job does not move its payload
	// (up to max_payload_bytes) out of the database again.
	Payloads []string
	Leases   []string
}

// Store is the database. Drivers: store/mysql (MariaDB) and store/sqlite (the embedded mode).
type Store interface {
	Executor
	// WithTx runs fn in one transaction: committed when fn returns nil, rolled back otherwise.
	// Deadlocks and serialization failures are retried a few times by the driver.
	WithTx(ctx context.Context, fn func(Tx) error) error
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// SchemaVersion returns the applied migration version and whether it is dirty.
	SchemaVersion(ctx context.Context) (version uint, dirty bool, err error)
	// Close releases the connections.
	Close() error
}
