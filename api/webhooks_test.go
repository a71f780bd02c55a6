package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/webhooks"
	"github.com/gpuorch/orchestrator/wire"
)

// withWebhooks is b with the webhooks service and a pre-run hook of type sleep at hook, the
// callback secret set and private addresses allowed as allowPrivate says.
func (b *bundle) withWebhooks(t *testing.T, allowPrivate bool, hook string) *bundle {
	t.Helper()
	w := &b.cfg.Webhooks
	w.AllowPrivate, w.CallbackSecret, w.PreRunSecret = allowPrivate, "callback-secret-0123456789", "pre-run-secret-0123456789"
	if hook != "" {
		w.PreRun = map[string]string{"sleep": hook}
	}
	b.srv = New(b.with(Options{Auth: b.srv.auth, Logger: slog.New(slog.DiscardHandler),
		Webhooks: webhooks.NewService(b.st, b.cfg, webhooks.ServiceOptions{}), PreRun: webhooks.NewPreRun(b.cfg, webhooks.PreRunOptions{Logger: slog.New(slog.DiscardHandler)})}))
	return b
}

// TestWebhookRoutes: subscriptions are an admin's, checked (a private address is refused
// unless allowed, naming the field), shown with their secret once, listed, paged, enabled,
// disabled and deleted.
func TestWebhookRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t).withWebhooks(t, false, "")

	for _, tc := range []struct {
		body  string
		field string
	}{
		{`{"url":"http://127.0.0.1:9000/h","events":["job.done"]}`, "url"},
		{`{"url":"http://10.0.0.8/h","events":["job.done"]}`, "url"},
		{`{"url":"http://localhost/h","events":["job.done"]}`, "url"},
		{`{"url":"http://[fe80::1]/h","events":["job.done"]}`, "url"},
		{`{"url":"ftp://hooks.example.com/","events":["job.done"]}`, "url"},
		{`{"url":"https://203.0.113.9/h","events":[]}`, "events"},
		{`{"url":"https://203.0.113.9/h","events":["job.exploded"]}`, "events[0]"},
		{`{"url":"https://203.0.113.9/h","events":["job.done","job.done"]}`, "events[1]"},
		{`{"url":"https://203.0.113.9/h","events":["job.done"],"filter":{"type":"nope"}}`, "filter.type"},
		{`{"url":"https://203.0.113.9/h","events":["job.done"],"filter":{"agent":"a b"}}`, "filter.agent"},
		{`{"url":"https://203.0.113.9/h","events":["job.done"],"secret":"mine"}`, "secret"},
	} {
		requireError(t, b.request(t, http.MethodPost, "/webhooks", "admin", tc.body), http.StatusBadRequest, CodeInvalidRequest, tc.field)
	}
	requireError(t, b.request(t, http.MethodPost, "/webhooks", "alice", `{"url":"https://203.0.113.9/h","events":["job.done"]}`),
		http.StatusForbidden, CodeForbidden, "")

	rec := b.request(t, http.MethodPost, "/webhooks", "admin",
		`{"url":"https://203.0.113.9/h?k=v","events":["job.done","schedule.skipped"],"filter":{"agent":"alice"}}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	created := decode[wire.Webhook](t, rec)
	require.Regexp(t, `^whsec_[0-9a-f]{64}$`, created.Secret)
	require.Equal(t, "active", created.Status)
	require.Equal(t, &wire.WebhookFilter{Agent: "alice"}, created.Filter)

	rec = b.request(t, http.MethodGet, "/webhooks/"+created.ID, "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	got := decode[wire.Webhook](t, rec)
	require.Empty(t, got.Secret, "the secret is shown once")
	require.NotContains(t, rec.Body.String(), created.Secret)
	require.Equal(t, created.URL, got.URL)
	list := decode[wire.WebhookList](t, b.request(t, http.MethodGet, "/webhooks", "admin", nil))
	require.Len(t, list.Webhooks, 1)
	require.Empty(t, list.Webhooks[0].Secret)

	// Deliveries, newest first, by pages.
	for range 3 {
		job := b.submitJob(t, "alice")
		require.NoError(t, b.st.AuditInsert(context.Background(), []store.AuditEvent{{TS: time.Now(), EventType: "job.running->done",
			JobID: job}}))
	}
	tail := webhooks.NewTailer(b.st, webhooks.TailerConfigFrom(b.cfg, webhooks.TailerConfig{}))
	res, err := tail.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 3, res.Queued)
	var ids []int64
	for cursor := ""; ; {
		rec := b.request(t, http.MethodGet, "/webhooks/"+created.ID+"/deliveries?limit=2&cursor="+cursor, "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		page := decode[wire.WebhookDeliveryList](t, rec)
		for _, d := range page.Deliveries {
			require.Equal(t, "pending", d.Status)
			require.Equal(t, "job.done", d.EventType)
			require.NotNil(t, d.NextAttemptAt)
			require.Empty(t, d.History)
			ids = append(ids, d.ID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	require.Len(t, ids, 3)
	require.Greater(t, ids[0], ids[2], "newest first")
	requireError(t, b.request(t, http.MethodGet, "/webhooks/"+created.ID+"/deliveries?cursor=x", "admin", nil),
		http.StatusBadRequest, CodeInvalidRequest, "cursor")
	requireError(t, b.request(t, http.MethodGet, "/webhooks/"+created.ID+"/deliveries?limit=0", "admin", nil),
		http.StatusBadRequest, CodeInvalidRequest, "limit")

	rec = b.request(t, http.MethodPost, "/webhooks/"+created.ID+"/disable", "admin", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "disabled", decode[wire.Webhook](t, rec).Status)
	require.Equal(t, 3, decode[wire.Webhook](t, rec).PendingDeliveries)
	rec = b.request(t, http.MethodPost, "/webhooks/"+created.ID+"/enable", "admin", nil)
	require.Equal(t, "active", decode[wire.Webhook](t, rec).Status)

	require.Equal(t, http.StatusNoContent, b.request(t, http.MethodDelete, "/webhooks/"+created.ID, "admin", nil).Code)
	requireError(t, b.request(t, http.MethodGet, "/webhooks/"+created.ID, "admin", nil), http.StatusNotFound, CodeNotFound, "")
	requireError(t, b.request(t, http.MethodDelete, "/webhooks/"+created.ID, "admin", nil), http.StatusNotFound, CodeNotFound, "")
	requireError(t, b.request(t, http.MethodGet, "/webhooks/"+created.ID+"/deliveries", "admin", nil), http.StatusNotFound,
		CodeNotFound, "")

	// With allow_private, the cluster's own addresses are endpoints too.
	b.withWebhooks(t, true, "")
	rec = b.request(t, http.MethodPost, "/webhooks", "admin", `{"url":"http://127.0.0.1:9000/h","events":["job.done"]}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())

	// A cluster holds at most MaxSubscriptions.
	now := time.Now()
	for i := range webhooks.MaxSubscriptions - 1 {
		require.NoError(t, b.st.WebhookInsert(context.Background(), store.WebhookSubscription{ID: fmt.Sprintf("wh_fill%03d", i),
			URL: "https://203.0.113.9/", Events: []string{"job.done"}, Secret: "s", Status: store.WebhookActive, CreatedAt: now, UpdatedAt: now}))
	}
	body := requireError(t, b.request(t, http.MethodPost, "/webhooks", "admin", `{"url":"https://203.0.113.9/h","events":["job.done"]}`),
		http.StatusConflict, CodeConflict, "")
	require.Equal(t, "a cluster has at most 100 webhook subscriptions: delete one first", body.Message)
}

// TestSubmitCallback: a submit's callback_url (single and batch) is checked as a webhook's
// URL, needs the cluster's callback secret, is kept and shown, and is part of the request a
// resubmit must repeat; an agent reads its callback secret.
func TestSubmitCallback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Webhooks.AllowPrivate = true // the callback secret is not set yet
	requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "alice",
		`{"type":"noop","payload":{},"callback_url":"https://203.0.113.9/cb"}`), http.StatusBadRequest, CodeInvalidRequest, "callback_url")

	b.withWebhooks(t, false, "")
	for _, url := range []string{"http://127.0.0.1:8080/cb", "http://169.254.169.254/", "file:///etc/passwd", "https://h/ x"} {
		body, _ := json.Marshal(map[string]any{"type": "noop", "payload": map[string]any{}, "callback_url": url})
		requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "alice", body), http.StatusBadRequest, CodeInvalidRequest,
			"callback_url")
	}
	rec := b.request(t, http.MethodPost, "/jobs/submit_batch", "alice",
		`{"jobs":[{"job_id":"cb-ok","type":"noop","payload":{},"callback_url":"https://203.0.113.9/cb?j=1"},
		          {"job_id":"cb-bad","type":"noop","payload":{},"callback_url":"http://10.1.1.1/cb"}]}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	batch := decode[wire.SubmitBatchResponse](t, rec)
	require.Nil(t, batch.Results[0].Error)
	require.NotNil(t, batch.Results[1].Error)
	require.Equal(t, "callback_url", batch.Results[1].Error.Field)

	job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/cb-ok", "alice", nil))
	require.Equal(t, "https://203.0.113.9/cb?j=1", job.CallbackURL)
	requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "alice",
		`{"job_id":"cb-ok","type":"noop","payload":{},"callback_url":"https://203.0.113.9/other"}`),
		http.StatusConflict, CodeIdempotencyMismatch, "callback_url")
	rec = b.request(t, http.MethodPost, "/jobs/submit", "alice", `{"job_id":"cb-ok","type":"noop","payload":{},"callback_url":"https://203.0.113.9/cb?j=1"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	// The callback secret: an agent's own; an admin names the agent.
	rec = b.request(t, http.MethodGet, "/webhooks/callback_secret?agent=bob", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	alice := decode[wire.CallbackSecret](t, rec)
	require.Equal(t, wire.CallbackSecret{Agent: "alice", Secret: webhooks.CallbackSecret(b.cfg.Webhooks.CallbackSecret, "alice")}, alice,
		"an agent token reads its own agent's, whatever it asks")
	bob := decode[wire.CallbackSecret](t, b.request(t, http.MethodGet, "/webhooks/callback_secret?agent=bob", "admin", nil))
	require.Equal(t, "bob", bob.Agent)
	require.NotEqual(t, alice.Secret, bob.Secret)
	requireError(t, b.request(t, http.MethodGet, "/webhooks/callback_secret", "admin", nil), http.StatusBadRequest, CodeInvalidRequest, "agent")
	requireError(t, b.request(t, http.MethodGet, "/webhooks/callback_secret", "worker", nil), http.StatusForbidden, CodeForbidden, "")
	b.cfg.Webhooks.CallbackSecret = ""
	b.srv = New(b.with(Options{Auth: b.srv.auth, Logger: slog.New(slog.DiscardHandler),
		Webhooks: webhooks.NewService(b.st, b.cfg, webhooks.ServiceOptions{})}))
	requireError(t, b.request(t, http.MethodGet, "/webhooks/callback_secret", "alice", nil), http.StatusNotFound, CodeNotFound, "")
}

// TestPreRunRoute: only the worker holding the job's current attempt may ask; the answer is
// the hook's decision, and a type without a hook runs.
func TestPreRunRoute(t *testing.T) {
	t.Parallel()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"message":"no budget left"}`))
	}))
	t.Cleanup(hook.Close)
	b := setup(t).withWebhooks(t, true, hook.URL)
	ctx := context.Background()
	claimOne := func(typ string) store.Job {
		job, _, err := b.eng.Submit(ctx, engine.SubmitParams{Type: typ, Agent: "alice", Payload: json.RawMessage(`{"ms":1}`)})
		require.NoError(t, err)
		res, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", Items: []engine.ClaimItem{{JobID: job.ID, Stream: typ}}})
		require.NoError(t, err)
		require.Len(t, res.Claimed, 1)
		return res.Claimed[0]
	}
	sleep := claimOne("sleep")
	req := wire.PreRunRequest{WorkerID: "w1", JobID: sleep.ID, Attempt: 1, LeaseToken: sleep.LeaseToken}
	rec := b.request(t, http.MethodPost, "/internal/jobs/pre_run", "worker", req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, wire.PreRunResponse{Decision: wire.PreRunFail, Message: "no budget left", StatusCode: 403},
		decode[wire.PreRunResponse](t, rec))

	for _, bad := range []wire.PreRunRequest{
		{WorkerID: "w2", JobID: req.JobID, Attempt: 1, LeaseToken: req.LeaseToken}, // another worker
		{WorkerID: "w1", JobID: req.JobID, Attempt: 2, LeaseToken: req.LeaseToken}, // another attempt
		{WorkerID: "w1", JobID: req.JobID, Attempt: 1, LeaseToken: "lt_x"},         // another lease
	} {
		requireError(t, b.request(t, http.MethodPost, "/internal/jobs/pre_run", "worker", bad), http.StatusConflict, CodeStale, "job_id")
	}
	requireError(t, b.request(t, http.MethodPost, "/internal/jobs/pre_run", "worker", wire.PreRunRequest{WorkerID: "w1", JobID: "nope"}),
		http.StatusNotFound, CodeNotFound, "")
	requireError(t, b.request(t, http.MethodPost, "/internal/jobs/pre_run", "alice", req), http.StatusForbidden, CodeForbidden, "")

	noop := claimOne("noop")
	rec = b.request(t, http.MethodPost, "/internal/jobs/pre_run", "worker",
		wire.PreRunRequest{WorkerID: "w1", JobID: noop.ID, Attempt: 1, LeaseToken: noop.LeaseToken})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, wire.PreRunResponse{Decision: wire.PreRunRun}, decode[wire.PreRunResponse](t, rec))
}
