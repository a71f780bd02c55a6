// Package storetest is the conformance suite of store.Store: every driver (store/mysql,
// store/sqlite) runs Run from its own tests and must pass it unchanged.
//
// The suite speaks only through the store interface. Subtests run in parallel on one store
// and one database, so each works on its own rows: job ids, agents and types carry a random
// per-subtest prefix, and time-based queries use instants no other subtest uses.
package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// Run runs the conformance suite against the store open returns. open is called twice: the
// first store is shared by all subtests but one, which reads a whole table and gets the second.
// Closing a store (and dropping its database) is open's job, for instance with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	tests := []subtest{
		{"InsertAndGet", testInsertAndGet},
		{"InsertDuplicateReturnsExisting", testInsertDuplicate},
		{"InsertConcurrentSameID", testInsertConcurrent},
		{"InsertIDsAreCaseSensitive", testInsertCaseSensitive},
		{"InsertNilPayload", testInsertNilPayload},
		{"InsertLargePayload", testInsertLargePayload},
		{"InsertManyAllOrNone", testInsertMany},
		{"UpdateManyShapesAndGuards", testUpdateMany},
		{"LeaseSetStatusMany", testLeaseSetStatusMany},
		{"LockJobsAndLeases", testLockJobsAndLeases},
		{"GetNotFound", testGetNotFound},
		{"UpdateCompareAndSet", testUpdateCAS},
		{"UpdateExpectAttempts", testUpdateExpectAttempts},
		{"UpdateExpectWorker", testUpdateExpectWorker},
		{"UpdateNilFieldsUnchanged", testUpdateNilFieldsUnchanged},
		{"UpdateRoundTrip", testUpdateRoundTrip},
		{"UpdateIdenticalValuesIsNotConflict", testUpdateIdentical},
		{"GetMany", testGetMany},
		{"Holders", testHolders},
		{"GetManyForUpdateInTx", testGetManyForUpdate},
		{"ListPagination", testListPagination},
		{"ListFilters", testListFilters},
		{"ListDispatchable", testListDispatchable},
		{"MarkEnqueued", testMarkEnqueued},
		{"SetWaiting", testSetWaiting},
		{"AuditInsertAndList", testAuditInsertAndList},
		{"AuditManyRows", testAuditManyRows},
		{"AuditUnfiltered", testAuditUnfiltered},
		{"WithTxCommit", testTxCommit},
		{"WithTxRollbackOnError", testTxRollbackOnError},
		{"WithTxRollbackOnPanic", testTxRollbackOnPanic},
		{"WithTxDeferChecks", testTxDeferChecks},
		{"ConcurrentCompareAndSet", testConcurrentCAS},
		{"Ping", testPing},
		{"Leader", testLeader},
		{"Maintenance", testMaintenance},
		{"Leases", testLeases},
		{"Admission", testAdmission},
		{"Pools", testPools},
		{"Nodes", testNodes},
		{"Schedules", testSchedules},
		{"Constraints", testConstraints},
		{"Webhooks", testWebhooks},
		{"JobFlows", testJobFlows},
		{"Workflows", testWorkflows},
		{"Approvals", testApprovals},
	}
	runAll(t, s, tests)
	// Retention reads the audit table from its oldest row: on a store of its own.
	t.Run("AuditDeleteBefore", func(t *testing.T) {
		t.Parallel()
		testAuditDeleteBefore(t, newBundle(open(t)))
	})
}

// subtest is one named conformance test, run on a bundle of its own.
type subtest struct {
	name string
	fn   func(t *testing.T, b *bundle)
}

// runAll runs every test in parallel, each on a fresh bundle of s.
func runAll(t *testing.T, s store.Store, tests []subtest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newBundle(s))
		})
	}
}

// bundle is one subtest's view of the shared store: its own id prefix and clock.
type bundle struct {
	s      store.Store
	prefix string
	// now is a fixed instant with a nanosecond part, so that tests see the truncation to
	// microseconds that every driver applies.
	now time.Time
}

func newBundle(s store.Store) *bundle {
	return &bundle{
		s:      s,
		prefix: fmt.Sprintf("st%016x-", rand.Uint64()),
		now:    time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC),
	}
}

// id returns a job id unique to the subtest.
func (b *bundle) id(name string) string { return b.prefix + name }

// agent returns an agent name unique to the subtest (so listings can be isolated).
func (b *bundle) agent() string { return b.prefix + "agent" }

// params returns insert parameters of a typical job.
func (b *bundle) params(name string) store.JobInsertParams {
	return store.JobInsertParams{
		ID:          b.id(name),
		Type:        "noop",
		Agent:       b.agent(),
		Payload:     []byte(`{"n": 1}`),
		MaxAttempts: 3,
		AvailableAt: b.now,
		GPUMemoryMB: 0,
		Timeout:     30 * time.Second,
		Now:         b.now,
	}
}

// insert inserts a job built by params and optional modifications, requiring success.
func (b *bundle) insert(t *testing.T, name string, mods ...func(*store.JobInsertParams)) store.Job {
	t.Helper()
	p := b.params(name)
	for _, m := range mods {
		m(&p)
	}
	j, inserted, err := b.s.JobInsert(t.Context(), p)
	require.NoError(t, err)
	require.True(t, inserted, "job %s inserted", p.ID)
	return j
}

// get reads a job, requiring success.
func (b *bundle) get(t *testing.T, id string) store.Job {
	t.Helper()
	j, err := b.s.JobGet(t.Context(), id)
	require.NoError(t, err)
	return j
}

// update applies a compare-and-set write with sensible defaults, returning its error.
func (b *bundle) update(t *testing.T, u store.JobUpdate) error {
	t.Helper()
	if u.Now.IsZero() {
		u.Now = b.now.Add(time.Second)
	}
	return b.s.JobUpdate(t.Context(), u)
}

// requireTime checks that got is want at microsecond precision, in UTC.
func requireTime(t *testing.T, want, got time.Time, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, time.UTC, got.Location(), msgAndArgs...)
	require.True(t, want.Truncate(time.Microsecond).Equal(got),
		"want %s, got %s %v", want.Truncate(time.Microsecond), got, fmt.Sprint(msgAndArgs...))
}

// requireTimePtr is requireTime for nullable times (nil want: got must be nil).
func requireTimePtr(t *testing.T, want, got *time.Time, msgAndArgs ...any) {
	t.Helper()
	if want == nil {
		require.Nil(t, got, msgAndArgs...)
		return
	}
	require.NotNil(t, got, msgAndArgs...)
	requireTime(t, *want, *got, msgAndArgs...)
}

// requireSameJob compares two jobs field by field, times at microsecond precision.
func requireSameJob(t *testing.T, want, got store.Job) {
	t.Helper()
	requireTime(t, want.AvailableAt, got.AvailableAt, "available_at")
	requireTime(t, want.CreatedAt, got.CreatedAt, "created_at")
	requireTime(t, want.UpdatedAt, got.UpdatedAt, "updated_at")
	requireTimePtr(t, want.StartedAt, got.StartedAt, "started_at")
	requireTimePtr(t, want.FinishedAt, got.FinishedAt, "finished_at")
	want.AvailableAt, want.CreatedAt, want.UpdatedAt, want.StartedAt, want.FinishedAt = got.AvailableAt, got.CreatedAt, got.UpdatedAt, got.StartedAt, got.FinishedAt
	require.Equal(t, want, got)
}

// ids returns the ids of jobs, in order.
func ids(jobs []store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func testPing(t *testing.T, b *bundle) {
	require.NoError(t, b.s.Ping(t.Context()))
}
