package pools

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

func TestRegistry(t *testing.T) {
	t.Parallel()

	t.Run("RegisterHeartbeatDeregister", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := t.Context()
		b.createPool(t, "p", 1, 0)
		in := b.register(t, "w1", "p")
		require.Equal(t, Instruction{PoolStatus: store.PoolStarting}, in)
		w := b.worker(t, "w1")
		require.Equal(t, store.WorkerIdle, w.Status)
		require.Equal(t, 1234, w.PID)

		b.clock.Advance(5 * time.Second)
		in, err := b.svc.HeartbeatWorker(ctx, HeartbeatParams{WorkerID: "w1", Status: store.WorkerExecuting,
			InFlight: 2, JobsClaimed: 3, Telemetry: json.RawMessage(`{"node_id":"node-1","gpus":[]}`)})
		require.NoError(t, err)
		require.Equal(t, store.InstructionNone, in.Instruction)
		w = b.worker(t, "w1")
		require.Equal(t, store.WorkerExecuting, w.Status)
		require.Equal(t, 2, w.InFlight)
		require.True(t, b.clock.Now().Equal(w.LastHeartbeat))
		require.JSONEq(t, `{"node_id":"node-1","gpus":[]}`, string(w.Telemetry))
		p := b.pool(t, "p")
		require.NotNil(t, p.LastActivityAt, "work reported: the pool is active")
		require.True(t, b.clock.Now().Equal(*p.LastActivityAt))

		// Jobs that came and went between two heartbeats are work too.
		b.clock.Advance(5 * time.Second)
		b.beat(t, "w1", store.WorkerIdle, 0, 5)
		require.True(t, b.clock.Now().Equal(*b.pool(t, "p").LastActivityAt))
		b.clock.Advance(5 * time.Second)
		b.beat(t, "w1", store.WorkerIdle, 0, 5)
		require.False(t, b.clock.Now().Equal(*b.pool(t, "p").LastActivityAt), "no new work: the pool stays idle")

		require.NoError(t, b.svc.DeregisterWorker(ctx, "w1"))
		require.NoError(t, b.svc.DeregisterWorker(ctx, "w1"), "deregistering again is fine")
		_, err = b.svc.HeartbeatWorker(ctx, HeartbeatParams{WorkerID: "w1", Status: store.WorkerIdle})
		require.ErrorIs(t, err, store.ErrNotFound, "an unknown worker must register again")
		require.Equal(t, []string{EventPoolCreated, EventWorkerRegistered, EventWorkerDeregistered}, b.auditTypes(t, "p"))
	})

	t.Run("RegisteringIntoADrainingPoolIsToldToDrain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.createPool(t, "p", 1, 0)
		_, _, err := b.svc.DrainPool(t.Context(), "p", "admin:t")
		require.NoError(t, err)
		require.Equal(t, store.InstructionDrain, b.register(t, "late", "p").Instruction)
		// No pool row at all: nothing to obey.
		require.Equal(t, Instruction{}, b.register(t, "lonely", "no-such-pool"))
		require.Equal(t, Instruction{}, b.register(t, "poolless", ""))
	})

	t.Run("HeartbeatAfterOffline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.register(t, "w", "")
		_, err := b.st.WorkerMarkOffline(t.Context(), store.WorkerOfflineParams{IDs: []string{"w"}, HeartbeatBefore: b.clock.Now().Add(time.Hour)})
		require.NoError(t, err)
		b.beat(t, "w", store.WorkerIdle, 0, 0)
		require.Equal(t, store.WorkerIdle, b.worker(t, "w").Status, "a heartbeat brings it back")
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, tc := range []struct {
			field string
			err   error
		}{
			{"worker_id", func() error {
				_, err := b.svc.RegisterWorker(t.Context(), RegisterParams{WorkerID: "bad id"})
				return err
			}()},
			{"pool_id", func() error {
				_, err := b.svc.RegisterWorker(t.Context(), RegisterParams{WorkerID: "w", PoolID: "bad pool"})
				return err
			}()},
			{"node_labels.gpu.count", func() error {
				_, err := b.svc.RegisterWorker(t.Context(), RegisterParams{WorkerID: "w", NodeLabels: map[string]string{"gpu.count": "9"}})
				return err
			}()},
			{"status", func() error {
				_, err := b.svc.HeartbeatWorker(t.Context(), HeartbeatParams{WorkerID: "w", Status: store.WorkerOffline})
				return err
			}()},
			{"in_flight", func() error {
				_, err := b.svc.HeartbeatWorker(t.Context(), HeartbeatParams{WorkerID: "w", Status: store.WorkerIdle, InFlight: -1})
				return err
			}()},
		} {
			var ve *engine.ValidationError
			require.True(t, errors.As(tc.err, &ve), "%s: %v", tc.field, tc.err)
			require.Equal(t, tc.field, ve.Field)
		}
	})
}

// TestRegisterRecordsNode: a registration records its node in the registry with the worker's
// configured labels, and a later one replaces them (an empty set clears them).
func TestRegisterRecordsNode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.svc.RegisterWorker(ctx, RegisterParams{WorkerID: "w", NodeID: "node-l", Types: []string{"noop"},
		NodeLabels: map[string]string{"zone": "a"}})
	require.NoError(t, err)
	n, err := b.st.NodeGet(ctx, "node-l")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "a"}, n.Labels)
	require.True(t, b.clock.Now().Equal(n.LastSeen))

	_, err = b.svc.RegisterWorker(ctx, RegisterParams{WorkerID: "w", NodeID: "node-l", Types: []string{"noop"},
		NodeLabels: map[string]string{}})
	require.NoError(t, err)
	n, err = b.st.NodeGet(ctx, "node-l")
	require.NoError(t, err)
	require.Empty(t, n.Labels)
}
