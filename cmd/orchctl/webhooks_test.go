package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/webhooks"
)

func TestWebhooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := *b.opts.Config
	cfg.Webhooks.AllowPrivate, cfg.Webhooks.CallbackSecret = true, "callback-secret-0123456789"
	b.opts.Config = &cfg
	b.opts.Webhooks = webhooks.NewService(b.st, &cfg, webhooks.ServiceOptions{})
	b.url = serve(t, b.opts)

	r := b.runOK(t, "webhooks", "list")
	require.Contains(t, r.stderr, "no webhook subscriptions")
	r = b.runOK(t, "webhooks", "create", "--url", "http://127.0.0.1:9/hook", "--events", "job.done,job.failed", "--agent", "alice")
	rows := tableRows(t, r.stdout)
	id := rows[0][0]
	require.Equal(t, []string{"active", "0", "0", "job.done,job.failed", "agent=alice", "http://127.0.0.1:9/hook"}, rows[0][1:7], "%s", r)
	require.Regexp(t, `(?m)^secret: whsec_[0-9a-f]{64}$`, r.stdout)
	r = b.run(t, "webhooks", "create", "--url", "http://127.0.0.1:9/hook", "--events", "job.nope")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "events[0]")
	r = b.run(t, "webhooks", "create", "--events", "job.done")
	require.Equal(t, exitUsage, r.code, "%s", r)

	list := decodeJSON[client.WebhookList](t, b.runOK(t, "webhooks", "list", "-o", "json"))
	require.Len(t, list.Webhooks, 1)
	require.Empty(t, list.Webhooks[0].Secret)

	// Two events queued for it: the deliveries, newest first, by pages.
	for _, job := range []string{b.submit(t, "j1", "alice"), b.submit(t, "j2", "alice")} {
		require.NoError(t, b.st.AuditInsert(t.Context(), []store.AuditEvent{{TS: time.Now(), EventType: "job.running->done", JobID: job}}))
	}
	res, err := webhooks.NewTailer(b.st, webhooks.TailerConfigFrom(&cfg, webhooks.TailerConfig{})).RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, res.Queued)
	r = b.runOK(t, "webhooks", "deliveries", id, "--limit", "1")
	rows = tableRows(t, r.stdout)
	require.Equal(t, []string{"job.done", "j2", "pending", "0"}, rows[0][2:6], "%s", r)
	require.Contains(t, r.stdout, "next page: --cursor ")
	cursor := r.stdout[strings.LastIndex(r.stdout, " ")+1:]
	page := decodeJSON[client.WebhookDeliveryList](t, b.runOK(t, "webhooks", "deliveries", id, "--cursor", strings.TrimSpace(cursor), "-o", "json"))
	require.Len(t, page.Deliveries, 1)
	require.Equal(t, "j1", page.Deliveries[0].JobID)

	r = b.runOK(t, "webhooks", "disable", id)
	require.Equal(t, "disabled", tableRows(t, r.stdout)[0][1])
	r = b.runOK(t, "webhooks", "enable", id)
	require.Equal(t, "active", tableRows(t, r.stdout)[0][1])
	r = b.runOK(t, "__complete", "webhooks", "delete", "")
	require.Contains(t, r.stdout, id+"\n")

	// The callback secrets: an admin names the agent, an agent reads its own.
	r = b.runOK(t, "webhooks", "callback-secret", "--agent", "alice")
	require.Equal(t, webhooks.CallbackSecret(cfg.Webhooks.CallbackSecret, "alice")+"\n", r.stdout)
	r = orchctl(t, "", "--api-url", b.url, "--token", b.alice, "webhooks", "callback-secret", "-o", "json")
	require.Equal(t, exitOK, r.code, "%s", r)
	var s client.CallbackSecret
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
	require.Equal(t, "alice", s.Agent)
	r = orchctl(t, "", "--api-url", b.url, "--token", b.alice, "webhooks", "list")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "403")

	r = b.runOK(t, "webhooks", "delete", id)
	require.Contains(t, r.stderr, "deleted webhook "+id)
	r = b.run(t, "webhooks", "delete", id)
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "404 not_found")
}
