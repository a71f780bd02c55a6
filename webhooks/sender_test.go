package webhooks_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/metrics/metricstest"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/webhooks"
	"github.com/gpuorch/orchestrator/wire"
)

// TestDeliveryRetries: a receiver that fails the first three attempts gets the fourth, with the
// same Idempotency-Key and body every time, each attempt signed with the endpoint's secret (a
// subscription's, and the job's agent's callback secret); the attempts are recorded.
func TestDeliveryRetries(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		rec := newReceiver(t, func(n int) int {
			if n <= 3 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		})
		sub := b.subscribe(t, rec.URL+"/hooks", webhooks.EventJobDone, webhooks.EventJobFailed)
		job := b.job(t, rec.URL+"/callback?token=abc")
		b.event(t, job, "job.running->done", `{"attempt":1,"lease_released":true}`)
		require.Equal(t, 2, b.tailOnce(t).Queued, "one for the subscription, one for the job's callback")
		require.Zero(t, b.tailOnce(t).Queued, "nothing is queued twice")

		for i := 1; i <= 4; i++ {
			res := b.sendOnce(t)
			require.Equal(t, 2, res.Attempts, "pass %d", i)
			if i < 4 {
				require.Zero(t, res.Delivered, "pass %d", i)
				require.Zero(t, b.sendOnce(t).Attempts, "nothing is due before its backoff")
			} else {
				require.Equal(t, 2, res.Delivered)
			}
			b.clock.Add(2 * time.Second)
		}
		require.Zero(t, b.sendOnce(t).Attempts, "delivered: never sent again")

		got := rec.requests()
		require.Len(t, got, 8)
		byKey := map[string][]received{}
		for _, r := range got {
			byKey[r.key] = append(byKey[r.key], r)
		}
		secrets := map[string]string{
			webhooks.IdempotencyKey(0, sub.ID):                 sub.Secret,
			webhooks.IdempotencyKey(0, store.DeliveryCallback): webhooks.CallbackSecret(callbackSecret, "ag"),
		}
		require.Len(t, byKey, 2)
		for key, rs := range byKey {
			require.Len(t, rs, 4, key)
			_, target, _ := strings.Cut(key, "-")
			secret := secrets["0-"+target]
			require.NotEmpty(t, secret, key)
			for _, r := range rs {
				require.Equal(t, string(rs[0].body), string(r.body), "the same body on every attempt")
				require.True(t, verifySignature(secret, r.signature, r.body, b.clock.Now()), "signature of %s", key)
				require.Contains(t, r.signature, "t="+r.timestamp+",")
				require.Equal(t, webhooks.EventJobDone, r.event)
				require.False(t, verifySignature("another-secret", r.signature, r.body, b.clock.Now()))
				require.NoError(t, webhooks.VerifySignature(secret, r.signature, r.body, b.clock.Now(), webhooks.ToleranceDefault))
			}
			var ev wire.WebhookEvent
			require.NoError(t, json.Unmarshal(rs[0].body, &ev))
			require.Equal(t, webhooks.EventJobDone, ev.Type)
			require.Equal(t, "evt_"+strings.TrimSuffix(key, "-"+target), ev.ID)
			var data wire.WebhookJobData
			require.NoError(t, json.Unmarshal(ev.Data, &data))
			require.Equal(t, wire.WebhookJobData{JobID: job, Type: "noop", Agent: "ag", Status: "done", Attempt: 1, MaxAttempts: 3,
				Actor: "worker:w1", Details: json.RawMessage(`{"attempt":1,"callback":true,"lease_released":true}`)}, data)
		}

		page, more, err := b.svc.Deliveries(t.Context(), sub.ID, 0, 10)
		require.NoError(t, err)
		require.False(t, more)
		require.Len(t, page, 1)
		d := page[0]
		require.Equal(t, store.DeliveryDelivered, d.Status)
		require.Equal(t, 4, d.WebhookDelivery.Attempts)
		require.NotNil(t, d.FinishedAt)
		require.Len(t, d.Attempts, 4)
		for i, a := range d.Attempts {
			require.Equal(t, i+1, a.Attempt)
			if i < 3 {
				require.Equal(t, http.StatusInternalServerError, a.StatusCode)
				require.Contains(t, a.Error, "HTTP 500: {\"error\":\"not now")
			} else {
				require.Equal(t, http.StatusOK, a.StatusCode)
				require.Empty(t, a.Error)
			}
		}
		v, err := b.svc.Get(t.Context(), sub.ID)
		require.NoError(t, err)
		require.Zero(t, v.ConsecutiveFailures, "a success forgets the failures")
		require.True(t, v.RetryAt.IsZero())
		require.Zero(t, v.Pending)

		fams := metricstest.Gather(t, metricstest.Registry(t, b.metrics))
		for kind, want := range map[string]float64{"subscription": 1, "callback": 1} {
			require.Equal(t, want, metricstest.Value(t, fams, "gpu_orchestrator_webhook_deliveries_total",
				map[string]string{"kind": kind, "result": "delivered"}))
			require.Equal(t, 3.0, metricstest.Value(t, fams, "gpu_orchestrator_webhook_attempts_total",
				map[string]string{"kind": kind, "result": "http_error"}))
		}
	})
}

// TestEndpointDisabled: an endpoint that fails max_consecutive_failures attempts in a row is
// disabled, with a webhook.disabled event for the endpoints that watch for it; a disabled one
// gets nothing queued nor sent, and enabled again it gets what was pending.
func TestEndpointDisabled(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		var up atomic.Bool
		down := newReceiver(t, func(int) int {
			if up.Load() {
				return http.StatusNoContent
			}
			return http.StatusServiceUnavailable
		})
		watcher := newReceiver(t, func(int) int { return http.StatusOK })
		b.send = b.sender(webhooks.SenderConfig{MaxFailures: 3})
		sub := b.subscribe(t, down.URL, webhooks.EventJobDone)
		watch := b.subscribe(t, watcher.URL, webhooks.EventWebhookDisabled)
		for range 2 {
			b.event(t, b.job(t, ""), "job.running->done", "")
		}
		require.Equal(t, 2, b.tailOnce(t).Queued)

		require.Equal(t, 2, b.sendOnce(t).Attempts, "a healthy endpoint gets everything due")
		b.clock.Add(2 * time.Second)
		res := b.sendOnce(t)
		require.Equal(t, 1, res.Attempts, "a failing endpoint gets one probe at a time")
		require.Equal(t, []string{sub.ID}, res.Disabled)
		v, err := b.svc.Get(t.Context(), sub.ID)
		require.NoError(t, err)
		require.Equal(t, store.WebhookDisabled, v.Status)
		require.Equal(t, 3, v.ConsecutiveFailures)
		require.Contains(t, v.DisabledReason, "3 failed attempts in a row; the last: HTTP 503")
		require.NotNil(t, v.DisabledAt)
		require.Equal(t, 2, v.Pending, "its deliveries wait")

		b.clock.Add(time.Hour)
		require.Zero(t, b.sendOnce(t).Attempts, "nothing goes to a disabled endpoint")
		require.Len(t, down.requests(), 3)

		// The disabling is an event for the watcher; new events are not queued for the
		// disabled endpoint.
		b.event(t, b.job(t, ""), "job.running->done", "")
		require.Equal(t, 1, b.tailOnce(t).Queued, "webhook.disabled for the watcher only")
		require.Equal(t, 1, b.sendOnce(t).Delivered)
		got := watcher.requests()
		require.Len(t, got, 1)
		require.True(t, verifySignature(watch.Secret, got[0].signature, got[0].body, b.clock.Now()))
		var ev wire.WebhookEvent
		require.NoError(t, json.Unmarshal(got[0].body, &ev))
		require.Equal(t, webhooks.EventWebhookDisabled, ev.Type)
		var data struct {
			WebhookID           string `json:"webhook_id"`
			ConsecutiveFailures int    `json:"consecutive_failures"`
			LastStatusCode      int    `json:"last_status_code"`
		}
		require.NoError(t, json.Unmarshal(ev.Data, &data))
		require.Equal(t, sub.ID, data.WebhookID)
		require.Equal(t, 3, data.ConsecutiveFailures)
		require.Equal(t, http.StatusServiceUnavailable, data.LastStatusCode)

		// Enabled again, with the receiver back: the pending deliveries go.
		up.Store(true)
		v, err = b.svc.SetEnabled(t.Context(), sub.ID, true, "admin:test")
		require.NoError(t, err)
		require.Equal(t, store.WebhookActive, v.Status)
		require.Zero(t, v.ConsecutiveFailures)
		require.Equal(t, 2, b.sendOnce(t).Delivered)
		require.Len(t, down.requests(), 5)
	})
}

// TestDialRules: without webhooks.allow_private, a subscription to a private address is
// refused at creation, and an endpoint whose name resolves to one (written to the store
// directly, as if DNS changed after the check) is refused at dial time; no redirect is
// followed.
func TestDialRules(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	rec := newReceiver(t, func(int) int { return http.StatusOK })
	strict := *b.cfg
	strict.Webhooks.AllowPrivate = false
	svc := webhooks.NewService(b.st, &strict, webhooks.ServiceOptions{})
	for _, url := range []string{rec.URL, "http://localhost:9/", "http://[::1]/", "http://169.254.169.254/latest/meta-data",
		"http://10.1.2.3/"} {
		_, err := svc.Create(t.Context(), webhooks.CreateParams{URL: url, Events: []string{webhooks.EventJobDone}})
		var in *webhooks.InputError
		require.ErrorAs(t, err, &in, url)
		require.Equal(t, "url", in.Field)
	}

	port := rec.URL[strings.LastIndex(rec.URL, ":"):]
	for i, url := range []string{rec.URL, "http://localhost" + port + "/"} {
		require.NoError(t, b.st.WebhookInsert(t.Context(), store.WebhookSubscription{ID: "wh_" + string(rune('a'+i)), URL: url,
			Events: []string{webhooks.EventJobDone}, Secret: "s", Status: store.WebhookActive, CreatedAt: b.clock.Now(),
			UpdatedAt: b.clock.Now()}))
	}
	b.event(t, b.job(t, ""), "job.running->done", "")
	require.Equal(t, 2, b.tailOnce(t).Queued)
	b.cfg = &strict
	res, err := b.sender(webhooks.SenderConfig{}).RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, res.Attempts)
	require.Zero(t, res.Delivered)
	require.Empty(t, rec.requests(), "nothing reached the loopback receiver")
	for _, id := range []string{"wh_a", "wh_b"} {
		page, _, err := b.svc.Deliveries(t.Context(), id, 0, 10)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Contains(t, page[0].LastError, "is loopback, private, link-local", id)
	}
	fams := metricstest.Gather(t, metricstest.Registry(t, b.metrics))
	require.Equal(t, 2.0, metricstest.Value(t, fams, "gpu_orchestrator_webhook_attempts_total",
		map[string]string{"kind": "subscription", "result": "blocked"}))

	// A redirect is an answer, not an instruction.
	target := newReceiver(t, func(int) int { return http.StatusOK })
	redirect := newReceiver(t, func(int) int { return http.StatusFound })
	redirect.Config.Handler = http.RedirectHandler(target.URL, http.StatusFound)
	b.subscribe(t, redirect.URL, webhooks.EventJobCancelled)
	b.event(t, b.job(t, ""), "job.pending->cancelled", "")
	require.Equal(t, 1, b.tailOnce(t).Queued)
	res = b.sendOnce(t)
	require.Equal(t, 1, res.Attempts)
	require.Zero(t, res.Delivered)
	require.Empty(t, target.requests(), "the redirect was not followed")
}
