package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// TestSubmitGroupCommit checks the group commit of concurrent submits: every job is committed
// and published once, answered as created, with its own audit row, however the submits were
// grouped; an id submitted twice at once is created once.
func TestSubmitGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const n = 300
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uid("grp")
	}
	ids[n-1] = ids[0] // the same id (and request) from two submitters at once
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created = map[string]int{}
	)
	for i := range n {
		wg.Go(func() {
			job, isNew, err := b.eng.Submit(ctx, engine.SubmitParams{
				JobID: ids[i], Type: "noop", Agent: "tester", Payload: json.RawMessage(fmt.Sprintf(`{"id":%q}`, ids[i])),
				Actor: "agent:tester",
			})
			require.NoError(t, err)
			require.Equal(t, ids[i], job.ID)
			require.Equal(t, store.JobPending, job.Status)
			if isNew {
				mu.Lock()
				created[job.ID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, created, n-1)
	for id, c := range created {
		require.Equal(t, 1, c, "job %s answered created more than once", id)
	}
	b.eng.FlushMarks(ctx) // after the publishes that follow the answers
	jobs, err := b.store.JobGetMany(ctx, ids, false)
	require.NoError(t, err)
	require.Len(t, jobs, n-1)
	for _, j := range jobs {
		require.True(t, j.Enqueued, "job %s not marked enqueued", j.ID)
		require.NotEmpty(t, j.StreamID)
		require.Equal(t, []string{engine.EventSubmitted}, b.auditTypes(t, j.ID))
	}
	l, err := b.streams.Len(ctx, "noop")
	require.NoError(t, err)
	require.EqualValues(t, n-1, l, "one stream entry per job")
}

// TestSubmitMany checks the batch submit: invalid items are refused on their own, an existing id
// answers the existing job, another agent's id is a conflict, and the rest are created.
func TestSubmitMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	existing := b.submit(t, "noop")
	fresh1, fresh2 := uid("many"), uid("many")
	out := b.eng.SubmitMany(ctx, []engine.SubmitParams{
		{JobID: fresh1, Type: "noop", Agent: "tester", Payload: json.RawMessage(`1`)},
		{JobID: uid("bad"), Type: "nope", Agent: "tester", Payload: json.RawMessage(`1`)},
		{JobID: existing.ID, Type: "noop", Agent: "tester", Payload: json.RawMessage(`{ "x": 1 }`)},
		{JobID: existing.ID, Type: "noop", Agent: "intruder", Payload: json.RawMessage(`3`)},
		{JobID: fresh2, Type: "noop", Agent: "tester", Payload: json.RawMessage(`4`)},
		{JobID: existing.ID, Type: "noop", Agent: "tester", Payload: json.RawMessage(`2`)},
	})
	require.Len(t, out, 6)
	require.NoError(t, out[0].Err)
	require.True(t, out[0].Created)
	require.Equal(t, fresh1, out[0].Job.ID)
	var ve *engine.ValidationError
	require.ErrorAs(t, out[1].Err, &ve)
	require.Equal(t, "type", ve.Field)
	require.NoError(t, out[2].Err)
	require.False(t, out[2].Created)
	require.JSONEq(t, `{"x":1}`, string(out[2].Job.Payload))
	require.ErrorIs(t, out[3].Err, store.ErrConflict)
	require.NoError(t, out[4].Err)
	require.True(t, out[4].Created)
	var mm *engine.MismatchError
	require.ErrorAs(t, out[5].Err, &mm, "the existing id with another payload")
	require.Equal(t, "payload", mm.Field)

	b.eng.FlushMarks(ctx)
	for _, id := range []string{fresh1, fresh2} {
		got, err := b.eng.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, got.Enqueued)
	}
	l, err := b.streams.Len(ctx, "noop")
	require.NoError(t, err)
	require.EqualValues(t, 3, l, "the existing job and the two new ones, each once")

	// A caller that has gone before its turn gets its context's error.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	out = b.eng.SubmitMany(gone, []engine.SubmitParams{{JobID: uid("gone"), Type: "noop", Agent: "tester", Payload: json.RawMessage(`1`)}})
	require.ErrorIs(t, out[0].Err, context.Canceled)
}

// TestClaimWaitsForTheSubmitsCommit checks what publishing inside the submit's transaction (a
// batch of publishInTxMin jobs or more) relies on: a worker that reads the entry before the
// commit claims with a locking read that waits for the inserting transaction, then takes the
// job, rather than refusing it as missing.
func TestClaimWaitsForTheSubmitsCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	id := uid("inflight")
	inserted, release := make(chan struct{}), make(chan struct{})
	txDone := make(chan error, 1)
	go func() {
		txDone <- b.store.WithTx(ctx, func(tx store.Tx) error {
			_, _, err := tx.JobInsert(ctx, store.JobInsertParams{ID: id, Type: "noop", Agent: "tester",
				Payload: json.RawMessage(`1`), MaxAttempts: 2, Now: b.clock.Now()})
			close(inserted)
			<-release
			return err
		})
	}()
	<-inserted
	claimed := make(chan engine.ClaimResult, 1)
	go func() { claimed <- b.claim(t, "w1", id) }()
	select {
	case res := <-claimed:
		t.Fatalf("the claim did not wait for the inserting transaction: %+v", res)
	case <-time.After(300 * time.Millisecond): // the claim's locking read is waiting by now
	}
	close(release)
	require.NoError(t, <-txDone)
	res := <-claimed
	require.Empty(t, res.Refused)
	require.Len(t, res.Claimed, 1)
	require.Equal(t, id, res.Claimed[0].ID)
}
