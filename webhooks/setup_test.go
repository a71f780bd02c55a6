package webhooks_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/webhooks"
	"github.com/gpuorch/orchestrator/wire"
)

// clock is a test clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// bundle is one test's store, configuration, clock and the webhooks loops over them.
type bundle struct {
	st      store.Store
	cfg     *config.Config
	clock   *clock
	svc     *webhooks.Service
	tail    *webhooks.Tailer
	send    *webhooks.Sender
	metrics *webhooks.Metrics
}

// callbackSecret is the cluster callback secret of the tests.
const callbackSecret = "cluster-callback-secret-0123456789"

// setupOn builds a bundle on st: private addresses allowed (the receivers are httptest servers
// on 127.0.0.1), a backoff of exactly one second (no jitter).
func setupOn(t *testing.T, st store.Store) *bundle {
	t.Helper()
	cfg, err := config.Load("", func(k string) string {
		return map[string]string{"ORCH_WEBHOOKS_ALLOW_PRIVATE": "1", "ORCH_WEBHOOKS_CALLBACK_SECRET": callbackSecret}[k]
	})
	require.NoError(t, err)
	cfg.Webhooks.Backoff = config.Backoff{Initial: time.Second, Multiplier: 1, Max: time.Second}
	cfg.Webhooks.Timeout = 10 * time.Second
	ck := &clock{now: time.Now().UTC().Truncate(time.Second)}
	m := webhooks.NewMetrics()
	log := slog.New(slog.DiscardHandler)
	b := &bundle{
		st: st, cfg: cfg, clock: ck, metrics: m,
		svc:  webhooks.NewService(st, cfg, webhooks.ServiceOptions{Now: ck.Now}),
		tail: webhooks.NewTailer(st, webhooks.TailerConfigFrom(cfg, webhooks.TailerConfig{Clock: ck.Now, Metrics: m, Logger: log})),
	}
	b.send = b.sender(webhooks.SenderConfig{})
	return b
}

// sender is a Sender of b's store, configuration, clock and metrics, with cfg's settings.
func (b *bundle) sender(cfg webhooks.SenderConfig) *webhooks.Sender {
	cfg.Clock, cfg.Metrics, cfg.Logger = b.clock.Now, b.metrics, slog.New(slog.DiscardHandler)
	return webhooks.NewSender(b.st, webhooks.SenderConfigFrom(b.cfg, cfg))
}

// setupMariaDB is a bundle on a fresh MariaDB database.
func setupMariaDB(t *testing.T) *bundle { return setupOn(t, testenv.MySQLStore(t)) }

// setupSQLite is a bundle on a fresh SQLite file, as the embedded mode runs.
func setupSQLite(t *testing.T) *bundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), sqlite.DBFileName)
	_, _, err := db.MigrateSQLite(t.Context(), path, db.CmdUp, nil)
	require.NoError(t, err)
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{Synchronous: "OFF"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return setupOn(t, st)
}

// onBothStores runs test as parallel subtests on MariaDB and on the embedded mode's SQLite.
func onBothStores(t *testing.T, test func(t *testing.T, b *bundle)) {
	t.Helper()
	for name, setup := range map[string]func(*testing.T) *bundle{"MariaDB": setupMariaDB, "SQLite": setupSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, setup(t))
		})
	}
}

var jobSeq atomic.Int64

// job inserts a job of agent "ag" and type noop with callback (none when empty), and returns
// its id.
func (b *bundle) job(t *testing.T, callback string) string {
	t.Helper()
	id := fmt.Sprintf("job-%d-%d", time.Now().UnixNano(), jobSeq.Add(1))
	_, inserted, err := b.st.JobInsert(t.Context(), store.JobInsertParams{ID: id, Type: "noop", Agent: "ag",
		Payload: json.RawMessage(`{}`), MaxAttempts: 3, CallbackURL: callback, Now: b.clock.Now()})
	require.NoError(t, err)
	require.True(t, inserted)
	return id
}

// event appends an audit row of the job, as its transition would: one that ends a job with a
// callback_url says so (store.AuditDetailCallback), as the engine's do.
func (b *bundle) event(t *testing.T, jobID, typ, details string) {
	t.Helper()
	require.NoError(t, b.st.AuditInsert(t.Context(), []store.AuditEvent{b.row(t, jobID, typ, details)}))
}

// row is the audit row event appends.
func (b *bundle) row(t *testing.T, jobID, typ, details string) store.AuditEvent {
	t.Helper()
	ev := store.AuditEvent{TS: b.clock.Now(), EventType: typ, JobID: jobID, Actor: "worker:w1"}
	if details != "" {
		ev.Details = json.RawMessage(details)
	}
	if name, ok := webhooks.EventOf(typ); ok && webhooks.Terminal(name) && jobID != "" {
		job, err := b.st.JobGet(t.Context(), jobID)
		require.NoError(t, err)
		if job.CallbackURL != "" {
			m := map[string]any{}
			if len(ev.Details) > 0 {
				require.NoError(t, json.Unmarshal(ev.Details, &m))
			}
			m[store.AuditDetailCallback] = true
			ev.Details, err = json.Marshal(m)
			require.NoError(t, err)
		}
	}
	return ev
}

// tailOnce runs a pass of the tail.
func (b *bundle) tailOnce(t *testing.T) webhooks.TailResult {
	t.Helper()
	res, err := b.tail.RunOnce(t.Context())
	require.NoError(t, err)
	return res
}

// sendOnce runs a pass of the sender.
func (b *bundle) sendOnce(t *testing.T) webhooks.SendResult {
	t.Helper()
	res, err := b.send.RunOnce(t.Context())
	require.NoError(t, err)
	return res
}

// subscribe subscribes url to events.
func (b *bundle) subscribe(t *testing.T, url string, events ...string) store.WebhookSubscription {
	t.Helper()
	sub, err := b.svc.Create(t.Context(), webhooks.CreateParams{URL: url, Events: events, Actor: "admin:test"})
	require.NoError(t, err)
	return sub
}

// received is one request a receiver got.
type received struct {
	key, signature, timestamp, event string
	body                             []byte
}

// receiver is an httptest endpoint that answers each request with the status its answer
// function gives (by the count of requests with that Idempotency-Key so far, from 1).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	byKey  map[string]int
	answer func(n int) int
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	t.Helper()
	r := &receiver{byKey: map[string]int{}, answer: answer}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		key := req.Header.Get(wire.HeaderIdempotencyKey)
		r.byKey[key]++
		n := r.byKey[key]
		r.got = append(r.got, received{key: key, signature: req.Header.Get(wire.HeaderSignature),
			timestamp: req.Header.Get(wire.HeaderTimestamp), event: req.Header.Get(wire.HeaderEvent), body: body})
		r.mu.Unlock()
		code := r.answer(n)
		w.WriteHeader(code)
		if code >= 300 {
			_, _ = fmt.Fprintf(w, `{"error":"not now (%d)"}`, n)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

// requests returns what it received so far.
func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// verifySignature mirrors the Go snippet of docs/security.md ("Verifying a signature"): a
// receiver recomputes the HMAC of "<t>.<body>" with its secret and compares it in constant
// time, and refuses a timestamp more than five minutes away.
func verifySignature(secret, header string, body []byte, now time.Time) bool {
	var t, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			t = v
		case "v1":
			sig = v
		}
	}
	ts, err := strconv.ParseInt(t, 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(t + "." + string(body)))
	return hmac.Equal([]byte(sig), []byte(hex.EncodeToString(mac.Sum(nil))))
}
