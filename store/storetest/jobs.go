package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

func testInsertAndGet(t *testing.T, b *bundle) {
	p := b.params("a")
	p.Type = "inference"
	p.Payload = []byte(`{"b" : 2,  "a":[1, 2.50], "s":"héllo ✓"}`) // stored as given, not normalised
	p.MaxAttempts = 5
	p.AvailableAt = b.now.Add(90 * time.Second)
	p.GPUMemoryMB = 8192
	p.GPUs, p.GPUExclusive, p.Priority = 2, true, 7
	p.Timeout = 90 * time.Second

	j, inserted, err := b.s.JobInsert(t.Context(), p)
	require.NoError(t, err)
	require.True(t, inserted)
	want := store.Job{
		ID: p.ID, Type: "inference", Agent: p.Agent, Payload: p.Payload,
		Status: store.JobPending, Attempts: 0, MaxAttempts: 5, AvailableAt: p.AvailableAt,
		Enqueued: false, GPUMemoryMB: 8192, GPUs: 2, GPUExclusive: true, Priority: 7, Timeout: 90 * time.Second,
		CreatedAt: b.now, UpdatedAt: b.now,
	}
	requireSameJob(t, want, j)
	requireSameJob(t, want, b.get(t, p.ID))
	require.Equal(t, string(p.Payload), string(b.get(t, p.ID).Payload))
}

func testInsertDuplicate(t *testing.T, b *bundle) {
	first := b.insert(t, "dup")

	p := b.params("dup")
	p.Type = "other"
	p.Payload = []byte(`{"second":true}`)
	p.Now = b.now.Add(time.Hour)
	got, inserted, err := b.s.JobInsert(t.Context(), p)
	require.NoError(t, err)
	require.False(t, inserted)
	requireSameJob(t, first, got)

	// Also inside a transaction (the submit path).
	require.NoError(t, b.s.WithTx(t.Context(), func(tx store.Tx) error {
		got, inserted, err := tx.JobInsert(t.Context(), p)
		require.NoError(t, err)
		require.False(t, inserted)
		requireSameJob(t, first, got)
		return nil
	}))
	requireSameJob(t, first, b.get(t, first.ID))
}

func testInsertConcurrent(t *testing.T, b *bundle) {
	// A client retrying a submit races itself: exactly one insert wins, every caller gets the
	// same job back, none gets an error.
	const n = 10
	var (
		wg       sync.WaitGroup
		jobs     [n]store.Job
		inserted [n]bool
		errs     [n]error
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			p := b.params("racy")
			p.Payload = fmt.Appendf(nil, `{"caller":%d}`, i)
			errs[i] = b.s.WithTx(t.Context(), func(tx store.Tx) error {
				var err error
				jobs[i], inserted[i], err = tx.JobInsert(t.Context(), p)
				return err
			})
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range n {
		require.NoError(t, errs[i])
		if inserted[i] {
			winners++
		}
	}
	require.Equal(t, 1, winners)
	stored := b.get(t, b.id("racy"))
	for i := range n {
		require.Equal(t, string(stored.Payload), string(jobs[i].Payload), "caller %d", i)
	}
}

func testInsertCaseSensitive(t *testing.T, b *bundle) {
	lower := b.insert(t, "case-job", func(p *store.JobInsertParams) { p.Type = "lower" })
	upper := b.insert(t, "CASE-JOB", func(p *store.JobInsertParams) { p.Type = "upper" })
	require.NotEqual(t, lower.ID, upper.ID)
	require.Equal(t, "lower", b.get(t, lower.ID).Type)
	require.Equal(t, "upper", b.get(t, upper.ID).Type)
}

func testInsertNilPayload(t *testing.T, b *bundle) {
	j := b.insert(t, "nil", func(p *store.JobInsertParams) { p.Payload = nil })
	require.Nil(t, j.Payload)
	require.Nil(t, b.get(t, j.ID).Payload)
	require.Nil(t, b.get(t, j.ID).Result)
}

func testInsertLargePayload(t *testing.T, b *bundle) {
	payload := []byte(`{"blob":"` + strings.Repeat("x", 3<<20) + `"}`) // 3 MiB
	j := b.insert(t, "large", func(p *store.JobInsertParams) { p.Payload = payload })
	require.Equal(t, payload, []byte(b.get(t, j.ID).Payload))
}

func testGetNotFound(t *testing.T, b *bundle) {
	_, err := b.s.JobGet(t.Context(), b.id("missing"))
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testUpdateCAS(t *testing.T, b *bundle) {
	j := b.insert(t, "cas")
	started := b.now.Add(2 * time.Second)
	require.NoError(t, b.update(t, store.JobUpdate{
		ID: j.ID, From: store.JobPending, To: store.JobClaimed,
		Attempts: new(1), WorkerID: new("w1"), LeaseToken: new("lease-1"), OwnerPool: new("pool-a"),
		StartedAt: &started, Now: started,
	}))
	got := b.get(t, j.ID)
	require.Equal(t, store.JobClaimed, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "w1", got.WorkerID)
	require.Equal(t, "lease-1", got.LeaseToken)
	require.Equal(t, "pool-a", got.OwnerPool)
	requireTimePtr(t, &started, got.StartedAt)
	requireTime(t, started, got.UpdatedAt)
	requireTime(t, b.now, got.CreatedAt)

	// The same move again loses: the job is no longer pending.
	err := b.update(t, store.JobUpdate{ID: j.ID, From: store.JobPending, To: store.JobClaimed, WorkerID: new("w2")})
	require.ErrorIs(t, err, store.ErrConflict)
	require.NotErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, "w1", b.get(t, j.ID).WorkerID)

	err = b.update(t, store.JobUpdate{ID: b.id("missing"), From: store.JobPending, To: store.JobClaimed})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NotErrorIs(t, err, store.ErrConflict)
}

func testUpdateExpectAttempts(t *testing.T, b *bundle) {
	j := b.insert(t, "attempts")
	err := b.update(t, store.JobUpdate{ID: j.ID, From: store.JobPending, ExpectAttempts: new(1), To: store.JobClaimed})
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, store.JobPending, b.get(t, j.ID).Status)

	require.NoError(t, b.update(t, store.JobUpdate{
		ID: j.ID, From: store.JobPending, ExpectAttempts: new(0), To: store.JobClaimed, Attempts: new(1),
	}))
	got := b.get(t, j.ID)
	require.Equal(t, store.JobClaimed, got.Status)
	require.Equal(t, 1, got.Attempts)
}

func testUpdateExpectWorker(t *testing.T, b *bundle) {
	j := b.insert(t, "worker")
	require.NoError(t, b.update(t, store.JobUpdate{ID: j.ID, From: store.JobPending, To: store.JobClaimed, WorkerID: new("w1")}))

	err := b.update(t, store.JobUpdate{ID: j.ID, From: store.JobClaimed, ExpectWorker: new("w2"), To: store.JobRunning})
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, store.JobClaimed, b.get(t, j.ID).Status)

	require.NoError(t, b.update(t, store.JobUpdate{ID: j.ID, From: store.JobClaimed, ExpectWorker: new("w1"), To: store.JobRunning}))
	require.Equal(t, store.JobRunning, b.get(t, j.ID).Status)
}

func testUpdateNilFieldsUnchanged(t *testing.T, b *bundle) {
	j := b.insert(t, "nil-fields")
	t1 := b.now.Add(time.Second)
	avail := b.now.Add(time.Minute)
	require.NoError(t, b.update(t, store.JobUpdate{
		ID: j.ID, From: store.JobPending, To: store.JobClaimed,
		Attempts: new(2), MaxAttempts: new(7), AvailableAt: &avail, Enqueued: new(true),
		OwnerPool: new("pool"), WorkerID: new("worker"), LeaseToken: new("lease"),
		Result: []byte(`{"partial":1}`), LastError: new("boom"), StartedAt: &t1, FinishedAt: &t1, Now: t1,
	}))
	before := b.get(t, j.ID)

	t2 := b.now.Add(2 * time.Second)
	require.NoError(t, b.update(t, store.JobUpdate{ID: j.ID, From: store.JobClaimed, To: store.JobRunning, Now: t2}))
	after := b.get(t, j.ID)

	want := before
	want.Status = store.JobRunning
	want.UpdatedAt = t2
	requireSameJob(t, want, after)
}

func testUpdateRoundTrip(t *testing.T, b *bundle) {
	j := b.insert(t, "round-trip")
	started := b.now.Add(1500 * time.Millisecond)
	require.NoError(t, b.update(t, store.JobUpdate{
		ID: j.ID, From: store.JobPending, To: store.JobRunning, Attempts: new(1), StartedAt: &started,
	}))

	finished := b.now.Add(3*time.Second + 987654321)
	result := []byte(`{"out" : [1,2,3], "text":"ünïcode"}`)
	lastErr := "exit status 2: no such file — ✗"
	require.NoError(t, b.update(t, store.JobUpdate{
		ID: j.ID, From: store.JobRunning, To: store.JobFailed,
		Result: result, LastError: &lastErr, FinishedAt: &finished, Now: finished,
	}))
	got := b.get(t, j.ID)
	require.Equal(t, store.JobFailed, got.Status)
	require.Equal(t, string(result), string(got.Result))
	require.Equal(t, lastErr, got.LastError)
	requireTimePtr(t, &started, got.StartedAt)
	requireTimePtr(t, &finished, got.FinishedAt)
	requireTime(t, finished, got.UpdatedAt)

	// Back to pending for a retry: a pointer to the zero time clears started_at/finished_at.
	retryAt := b.now.Add(time.Hour)
	require.NoError(t, b.update(t, store.JobUpdate{
		ID: j.ID, From: store.JobFailed, To: store.JobPending, AvailableAt: &retryAt,
		Enqueued: new(false), WorkerID: new(""), LeaseToken: new(""),
		StartedAt: new(time.Time{}), FinishedAt: new(time.Time{}),
	}))
	got = b.get(t, j.ID)
	require.Equal(t, store.JobPending, got.Status)
	require.Nil(t, got.StartedAt)
	require.Nil(t, got.FinishedAt)
	requireTime(t, retryAt, got.AvailableAt)
	require.Equal(t, string(result), string(got.Result), "result unchanged when nil")
	require.Equal(t, lastErr, got.LastError, "last_error unchanged when nil")
}

func testUpdateIdentical(t *testing.T, b *bundle) {
	j := b.insert(t, "identical")
	// Nothing changes: same status, same updated_at, same values. Still a successful match.
	for range 2 {
		require.NoError(t, b.update(t, store.JobUpdate{
			ID: j.ID, From: store.JobPending, To: store.JobPending, Attempts: new(0),
			WorkerID: new(""), Now: b.now,
		}))
	}
	requireSameJob(t, j, b.get(t, j.ID))
}

func testGetMany(t *testing.T, b *bundle) {
	a := b.insert(t, "a")
	c := b.insert(t, "c")
	got, err := b.s.JobGetMany(t.Context(), []string{c.ID, b.id("missing"), a.ID, a.ID}, false)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{a.ID, c.ID}, ids(got))
	for _, j := range got {
		want := a
		if j.ID == c.ID {
			want = c
		}
		requireSameJob(t, want, j)
	}

	got, err = b.s.JobGetMany(t.Context(), nil, false)
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = b.s.JobGetMany(t.Context(), []string{b.id("missing")}, false)
	require.NoError(t, err)
	require.Empty(t, got)
}

func testHolders(t *testing.T, b *bundle) {
	a := b.insert(t, "holders-a")
	c := b.insert(t, "holders-c")
	require.NoError(t, b.update(t, store.JobUpdate{ID: c.ID, From: store.JobPending, To: store.JobClaimed,
		WorkerID: new("w1"), Now: b.now}))
	got, err := b.s.JobHolders(t.Context(), []string{c.ID, b.id("missing"), a.ID, a.ID, "not ascii é"})
	require.NoError(t, err)
	require.ElementsMatch(t, []store.JobHolder{
		{ID: a.ID, Status: store.JobPending},
		{ID: c.ID, Status: store.JobClaimed, WorkerID: "w1"},
	}, got)

	got, err = b.s.JobHolders(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

func testGetManyForUpdate(t *testing.T, b *bundle) {
	var all []string
	for _, n := range []string{"x", "y", "z"} {
		all = append(all, b.insert(t, n).ID)
	}
	require.NoError(t, b.s.WithTx(t.Context(), func(tx store.Tx) error {
		jobs, err := tx.JobGetMany(t.Context(), append(all, b.id("missing")), true)
		if err != nil {
			return err
		}
		require.Len(t, jobs, 3)
		for _, j := range jobs {
			if err := tx.JobUpdate(t.Context(), store.JobUpdate{
				ID: j.ID, From: j.Status, ExpectAttempts: new(j.Attempts), To: store.JobClaimed,
				Attempts: new(j.Attempts + 1), Now: b.now.Add(time.Second),
			}); err != nil {
				return err
			}
		}
		return nil
	}))
	got, err := b.s.JobGetMany(t.Context(), all, false)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, j := range got {
		require.Equal(t, store.JobClaimed, j.Status)
		require.Equal(t, 1, j.Attempts)
	}
	got, err = b.s.JobGetMany(t.Context(), nil, true)
	require.NoError(t, err)
	require.Empty(t, got)
}
