package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testNodes runs the conformance tests of the node registry, each on nodes named with the
// subtest's prefix.
func testNodes(t *testing.T, parent *bundle) {
	runAll(t, parent.s, []subtest{
		{"UpsertAndGet", testNodeUpsertAndGet},
		{"UpsertMergesSources", testNodeUpsertMergesSources},
		{"UpsertConcurrent", testNodeUpsertConcurrent},
		{"Cordon", testNodeCordon},
		{"InTx", testNodeInTx},
	})
}

func testNodeUpsertAndGet(t *testing.T, b *bundle) {
	ctx := t.Context()
	id := b.prefix + "node"
	_, err := b.s.NodeGet(ctx, id)
	require.ErrorIs(t, err, store.ErrNotFound)

	require.NoError(t, b.s.NodeUpsert(ctx, id, nil, b.now))
	n, err := b.s.NodeGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, id, n.ID)
	require.Equal(t, map[string]string{}, n.Labels)
	require.False(t, n.Cordoned)
	require.Nil(t, n.CordonedAt)
	requireTime(t, b.now, n.FirstSeen, "first_seen")
	requireTime(t, b.now, n.LastSeen, "last_seen")

	later := b.now.Add(time.Minute)
	require.NoError(t, b.s.NodeUpsert(ctx, id, map[string]string{"zone": "a"}, later))
	// last_seen never goes back.
	require.NoError(t, b.s.NodeUpsert(ctx, id, nil, b.now))
	n, err = b.s.NodeGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "a"}, n.Labels)
	requireTime(t, b.now, n.FirstSeen, "first_seen")
	requireTime(t, later, n.LastSeen, "last_seen")

	// NodeList is sorted by id and holds both of this subtest's nodes.
	require.NoError(t, b.s.NodeUpsert(ctx, b.prefix+"a-node", nil, b.now))
	all, err := b.s.NodeList(ctx)
	require.NoError(t, err)
	var mine []string
	for i, n := range all {
		if i > 0 {
			require.Less(t, all[i-1].ID, n.ID)
		}
		if len(n.ID) > len(b.prefix) && n.ID[:len(b.prefix)] == b.prefix {
			mine = append(mine, n.ID)
		}
	}
	require.Equal(t, []string{b.prefix + "a-node", id}, mine)
}

func testNodeUpsertMergesSources(t *testing.T, b *bundle) {
	ctx := t.Context()
	id := b.prefix + "node"
	require.NoError(t, b.s.NodeUpsert(ctx, id, map[string]string{"zone": "a", "tier": "prod"}, b.now))
	require.NoError(t, b.s.NodeUpsert(ctx, id, map[string]string{"gpu.count": "2", "gpu.driver": "sim"}, b.now))
	n, err := b.s.NodeGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "a", "tier": "prod", "gpu.count": "2", "gpu.driver": "sim"}, n.Labels)

	// Each source replaces its own set only.
	require.NoError(t, b.s.NodeUpsert(ctx, id, map[string]string{"zone": "b"}, b.now))
	require.NoError(t, b.s.NodeUpsert(ctx, id, map[string]string{"gpu.count": "4"}, b.now))
	n, err = b.s.NodeGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "b", "gpu.count": "4"}, n.Labels)
}

func testNodeUpsertConcurrent(t *testing.T, b *bundle) {
	ctx := t.Context()
	id := b.prefix + "node"
	var (
		wg   sync.WaitGroup
		errs = make([]error, 8)
	)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			labels := map[string]string{"zone": fmt.Sprint(i)}
			if i%2 == 1 {
				labels = map[string]string{"gpu.count": fmt.Sprint(i)}
			}
			errs[i] = b.s.NodeUpsert(ctx, id, labels, b.now.Add(time.Duration(i)*time.Second))
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	n, err := b.s.NodeGet(ctx, id)
	require.NoError(t, err)
	// Whichever writer of each source came last, both sources are there.
	require.Len(t, n.Labels, 2)
	require.Contains(t, n.Labels, "zone")
	require.Contains(t, n.Labels, "gpu.count")
	requireTime(t, b.now.Add(7*time.Second), n.LastSeen, "last_seen")
}

func testNodeCordon(t *testing.T, b *bundle) {
	ctx := t.Context()
	id := b.prefix + "node"
	_, err := b.s.NodeSetCordon(ctx, id, true, "x", "admin", b.now)
	require.ErrorIs(t, err, store.ErrNotFound)

	require.NoError(t, b.s.NodeUpsert(ctx, id, map[string]string{"zone": "a"}, b.now))
	at := b.now.Add(time.Second)
	n, err := b.s.NodeSetCordon(ctx, id, true, "disk swap", "admin:ops", at)
	require.NoError(t, err)
	require.True(t, n.Cordoned)
	require.Equal(t, "disk swap", n.CordonReason)
	require.Equal(t, "admin:ops", n.CordonedBy)
	requireTimePtr(t, &at, n.CordonedAt, "cordoned_at")
	require.Equal(t, map[string]string{"zone": "a"}, n.Labels)

	// An upsert leaves the cordon alone.
	require.NoError(t, b.s.NodeUpsert(ctx, id, map[string]string{"zone": "b"}, at))
	got, err := b.s.NodeGet(ctx, id)
	require.NoError(t, err)
	require.True(t, got.Cordoned)

	n, err = b.s.NodeSetCordon(ctx, id, false, "", "admin", at.Add(time.Second))
	require.NoError(t, err)
	require.False(t, n.Cordoned)
	require.Nil(t, n.CordonedAt)
	require.Equal(t, "admin", n.CordonedBy)
}

func testNodeInTx(t *testing.T, b *bundle) {
	ctx := t.Context()
	id := b.prefix + "node"
	require.NoError(t, b.s.NodeUpsert(ctx, id, nil, b.now))
	rollback := errors.New("roll back")
	err := b.s.WithTx(ctx, func(tx store.Tx) error {
		n, err := tx.NodeSetCordon(ctx, id, true, "r", "admin", b.now)
		require.NoError(t, err)
		require.True(t, n.Cordoned)
		require.NoError(t, tx.NodeUpsert(ctx, id, map[string]string{"zone": "a"}, b.now))
		return rollback
	})
	require.ErrorIs(t, err, rollback)
	n, err := b.s.NodeGet(ctx, id)
	require.NoError(t, err)
	require.False(t, n.Cordoned)
	require.Empty(t, n.Labels)
}
