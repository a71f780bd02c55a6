package retention_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/retention"
	"github.com/gpuorch/orchestrator/store"
)

// The engine's tests (engine/retention_test.go) drive the Cleaner through whole job lives;
// these check what the package itself owns: the fence and the batches over a bare store.
func TestCleaner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }

	setup := func(t *testing.T, rows int) (store.Store, *config.Config) {
		t.Helper()
		st := testenv.MySQLStore(t)
		cfg, err := config.Load("", func(string) string { return "" })
		require.NoError(t, err)
		old := now.Add(-cmp.Or(cfg.AuditRetention, config.AuditRetentionDefault) - time.Hour)
		evs := make([]store.AuditEvent, rows)
		for i := range evs {
			evs[i] = store.AuditEvent{TS: old, EventType: "test.old", Actor: "admin"}
		}
		evs = append(evs, store.AuditEvent{TS: now, EventType: "test.new", Actor: "admin"})
		require.NoError(t, st.WithTx(ctx, func(tx store.Tx) error { return tx.AuditInsert(ctx, evs) }))
		return st, cfg
	}
	audit := func(t *testing.T, st store.Store) int {
		t.Helper()
		evs, err := st.AuditList(ctx, store.AuditListParams{Limit: 1000})
		require.NoError(t, err)
		return len(evs)
	}

	t.Run("DeletesOldAuditRowsInBatches", func(t *testing.T) {
		t.Parallel()
		st, cfg := setup(t, 5)
		res, err := retention.NewCleaner(st, cfg, retention.Config{Batch: 2, Clock: clock}).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, retention.Result{Audit: 5}, res)
		require.Equal(t, 1, audit(t, st), "the recent row stays")
	})

	t.Run("DeletesFinishedWebhookDeliveries", func(t *testing.T) {
		t.Parallel()
		st, cfg := setup(t, 0)
		old := now.Add(-cfg.Webhooks.Retention - time.Hour)
		var ds []store.WebhookDelivery
		for i := range 3 {
			ds = append(ds, store.WebhookDelivery{URL: "https://h.example.com/", EventID: int64(i + 1), EventType: "job.done",
				EventAt: old, IdempotencyKey: fmt.Sprintf("%d-callback", i+1), Body: []byte(`{}`), NextAttemptAt: old, CreatedAt: old})
		}
		require.NoError(t, st.WebhookDeliveryInsert(ctx, ds))
		due, err := st.WebhookDeliveriesDue(ctx, now, 10)
		require.NoError(t, err)
		require.Len(t, due, 3)
		// Two ended long ago; the third is still pending, however old.
		for _, d := range due[:2] {
			_, err := st.WebhookDeliveryRecord(ctx, []store.DeliveryRecord{{ID: d.ID, Status: store.DeliveryDelivered,
				NextAttemptAt: old, Attempt: store.WebhookAttempt{StatusCode: 200, StartedAt: old}, Now: old}})
			require.NoError(t, err)
		}
		res, err := retention.NewCleaner(st, cfg, retention.Config{Batch: 1, Clock: clock}).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, retention.Result{Deliveries: 2}, res)
		left, err := st.WebhookDeliveriesDue(ctx, now, 10)
		require.NoError(t, err)
		require.Len(t, left, 1)
		require.Equal(t, due[2].ID, left[0].ID)
	})

	t.Run("FencedPassDeletesNothing", func(t *testing.T) {
		t.Parallel()
		st, cfg := setup(t, 3)
		notLeader := errors.New("not the leader")
		c := retention.NewCleaner(st, cfg, retention.Config{Batch: 2, Clock: clock,
			Fence: func(context.Context, store.Tx) error {
				return fmt.Errorf("check term: %w", errors.Join(notLeader, store.ErrFenced))
			}})
		res, err := c.RunOnce(ctx)
		require.ErrorIs(t, err, store.ErrFenced)
		require.Equal(t, retention.Result{}, res)
		require.Equal(t, 4, audit(t, st))
	})
}
