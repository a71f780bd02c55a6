package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/webhooks"
)

// webhookConfig sends deliveries fast (interval, backoff), never disables an endpoint nor gives
// a delivery up, and lets them reach the receivers of the test on 127.0.0.1.
const webhookConfig = `
webhooks:
  allow_private: true
  callback_secret: e2e-callback-secret-0123456789
  interval: 100ms
  backoff: {initial: 100ms, max: 500ms}
  max_consecutive_failures: 1000
  max_attempts: 1000
`

// hookRequest is one request a receiver got.
type hookRequest struct {
	path, key, signature string
	body                 []byte
	at                   time.Time
	accepted             bool
}

// hookReceiver is an endpoint that refuses every request (503) until up, then takes them.
type hookReceiver struct {
	*httptest.Server
	up  atomic.Bool
	mu  sync.Mutex
	got []hookRequest
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		up := r.up.Load()
		r.mu.Lock()
		r.got = append(r.got, hookRequest{path: req.URL.Path, key: req.Header.Get("Idempotency-Key"),
			signature: req.Header.Get("X-Orchestrator-Signature"), body: body, at: time.Now(), accepted: up})
		r.mu.Unlock()
		if !up {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.Close)
	return r
}

// requests returns what it got so far.
func (r *hookReceiver) requests() []hookRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookRequest(nil), r.got...)
}

// TestWebhooksSurviveRestart: jobs with a callback_url and a subscription to job.done, their
// receiver refusing every delivery while the orchestrator is killed with SIGKILL and started
// again: once the receiver takes them, every job's terminal event reaches both endpoints,
// signed, and a delivery that came more than once came with the same Idempotency-Key and
// body. On MariaDB + Redis, and in the embedded mode (SQLite).
func TestWebhooksSurviveRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"MariaDB", "Embedded"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testWebhooksSurviveRestart(t, mode == "Embedded")
		})
	}
}

func testWebhooksSurviveRestart(t *testing.T, embedded bool) {
	rec := newHookReceiver(t)
	var (
		c     *cluster
		start func(name string) *proc
	)
	if embedded {
		c = newEmbedded(t, webhookConfig)
		start = func(name string) *proc { return c.startDev(name) }
	} else {
		c = newCluster(t, webhookConfig)
		start = c.startOrchestrator
	}
	orch := start("orch-1")
	if !embedded {
		c.startWorker("worker-1")
	}
	ctx := context.Background()
	sub, err := c.api.CreateWebhook(ctx, client.WebhookRequest{URL: rec.URL + "/sub", Events: []string{webhooks.EventJobDone}})
	require.NoError(t, err)
	cb, err := c.api.GetCallbackSecret(ctx, "e2e")
	require.NoError(t, err)

	jobs := ids("hook", 40)
	for _, id := range jobs {
		_, err := c.api.Submit(ctx, client.SubmitRequest{JobID: id, Type: "noop", Agent: "e2e", Payload: []byte(`{}`),
			CallbackURL: rec.URL + "/cb/" + id})
		require.NoError(t, err)
	}
	c.waitStatus("done", len(jobs), 2*time.Minute)
	// The receiver refuses: wait until every delivery was tried and refused, then kill.
	waitFor(t, 2*time.Minute, "every delivery refused once", func() bool { return len(keysOf(rec.requests())) == 2*len(jobs) })
	orch.kill()
	refusedBefore := len(rec.requests())
	t.Logf("killed the orchestrator after %d refused attempts", refusedBefore)

	start("orch-2")
	waitFor(t, 2*time.Minute, "the new process sending again", func() bool { return len(rec.requests()) > refusedBefore })
	rec.up.Store(true)
	waitFor(t, 2*time.Minute, "every delivery taken", func() bool {
		taken := map[string]bool{}
		for _, r := range rec.requests() {
			if r.accepted {
				taken[r.key] = true
			}
		}
		return len(taken) == 2*len(jobs)
	})

	// Per job and endpoint: one key, one body, every request of it signed.
	type target struct{ job, endpoint string }
	keys, bodies := map[target]map[string]bool{}, map[string]string{}
	for _, r := range rec.requests() {
		var ev client.WebhookEvent
		require.NoError(t, json.Unmarshal(r.body, &ev))
		require.Equal(t, webhooks.EventJobDone, ev.Type)
		var data client.WebhookJobData
		require.NoError(t, json.Unmarshal(ev.Data, &data))
		require.Equal(t, "done", data.Status)
		secret, endpoint := sub.Secret, "sub"
		if strings.HasPrefix(r.path, "/cb/") {
			secret, endpoint = cb.Secret, "callback"
			require.Equal(t, "/cb/"+data.JobID, r.path, "a job's callback carries that job's event")
		}
		require.NoError(t, webhooks.VerifySignature(secret, r.signature, r.body, r.at, webhooks.ToleranceDefault),
			"%s of %s", endpoint, data.JobID)
		tg := target{data.JobID, endpoint}
		if keys[tg] == nil {
			keys[tg] = map[string]bool{}
		}
		keys[tg][r.key] = true
		if b, ok := bodies[r.key]; ok {
			require.Equal(t, b, string(r.body), "the same body on every attempt of %s", r.key)
		}
		bodies[r.key] = string(r.body)
	}
	require.Len(t, keys, 2*len(jobs), "every job's event reached both endpoints")
	for tg, ks := range keys {
		require.Len(t, ks, 1, "%v came under one Idempotency-Key", tg)
	}
	// The sender records a delivery after its receiver answered: the last marks may still be on
	// their way.
	waitFor(t, time.Minute, "every delivery recorded", func() bool {
		h, err := c.api.GetWebhook(ctx, sub.ID)
		return err == nil && h.PendingDeliveries == 0
	})
	h, err := c.api.GetWebhook(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, "active", h.Status)
}

// keysOf is the distinct idempotency keys of rs.
func keysOf(rs []hookRequest) map[string]bool {
	out := map[string]bool{}
	for _, r := range rs {
		out[r.key] = true
	}
	return out
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s never happened", d, what)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestPreRunHook: a type's pre-run hook, called by the orchestrator before each attempt
// starts (embedded mode, its in-process worker): a 403 fails the job for good with the hook's
// message and its handler never runs; a 503 retries it, and once the hook answers 2xx it runs.
func TestPreRunHook(t *testing.T) {
	t.Parallel()
	const secret = "e2e-pre-run-secret-0123456789"
	var (
		mu    sync.Mutex
		calls = map[string]int{}
		bad   []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev client.WebhookEvent
		var data client.WebhookJobData
		var payload struct{ Mode string }
		_ = json.Unmarshal(body, &ev)
		_ = json.Unmarshal(ev.Data, &data)
		_ = json.Unmarshal(data.Payload, &payload)
		mu.Lock()
		calls[data.JobID]++
		n := calls[data.JobID]
		if err := webhooks.VerifySignature(secret, r.Header.Get("X-Orchestrator-Signature"), body, time.Now(), time.Minute); err != nil {
			bad = append(bad, data.JobID+": "+err.Error())
		}
		mu.Unlock()
		switch {
		case payload.Mode == "deny":
			w.WriteHeader(http.StatusForbidden)
			_, _ = fmt.Fprint(w, `{"message":"denied by policy"}`)
		case payload.Mode == "flaky" && n == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(hook.Close)
	c := newEmbedded(t, fmt.Sprintf(`
webhooks:
  allow_private: true
  pre_run_secret: %s
  pre_run: {echo: %q}
`, secret, hook.URL+"/pre-run"))
	c.startDev("dev")
	ctx := context.Background()
	for id, payload := range map[string]string{"ok": `{"mode":"ok"}`, "deny": `{"mode":"deny"}`, "flaky": `{"mode":"flaky"}`,
		"free": `{"mode":"deny"}`} {
		typ := "echo"
		if id == "free" {
			typ = "noop" // no hook: runs whatever its payload says
		}
		_, err := c.api.Submit(ctx, client.SubmitRequest{JobID: id, Type: typ, Agent: "e2e", Payload: []byte(payload)})
		require.NoError(t, err)
	}
	c.waitCount(2*time.Minute, "three jobs done and one dead", func(m map[string]int) bool {
		return m["done"] == 3 && m["dead_letter"] == 1
	})

	deny, err := c.api.GetJob(ctx, "deny")
	require.NoError(t, err)
	require.Equal(t, "dead_letter", deny.Status)
	require.Equal(t, "denied by policy", deny.LastError, "the hook's message is the job's error")
	require.Equal(t, 1, deny.Attempts, "refused for good: not retried")
	require.Nil(t, deny.Result, "its handler never ran")
	flaky, err := c.api.GetJob(ctx, "flaky")
	require.NoError(t, err)
	require.Equal(t, "done", flaky.Status)
	require.Equal(t, 2, flaky.Attempts, "the 503 cost an attempt, retried with backoff")
	require.JSONEq(t, `{"mode":"flaky"}`, string(flaky.Result), "it ran once the hook let it")
	ok, err := c.api.GetJob(ctx, "ok")
	require.NoError(t, err)
	require.Equal(t, 1, ok.Attempts)

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, bad, "every call signed")
	require.Equal(t, map[string]int{"ok": 1, "deny": 1, "flaky": 2}, calls, "one call per attempt of the hooked type only")
}
