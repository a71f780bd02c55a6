package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// testMaxPayload keeps payload limits small so oversize bodies are cheap to build.
const testMaxPayload = 4096

// bundle is one API server under test with a token per role.
type bundle struct {
	srv    *Server
	eng    *engine.Engine
	st     store.Store
	sc     *streams.Client
	lm     *leases.Manager
	cfg    *config.Config
	tokens map[string]string // "alice", "bob" (agents), "worker", "admin" → token
}

func testConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Load("", func(key string) string {
		if key == "ORCH_MAX_PAYLOAD_BYTES" {
			return "4096"
		}
		return ""
	})
	require.NoError(t, err)
	return cfg
}

// testTokens makes one token per test identity and the Tokens that accept them.
func testTokens(t testing.TB) (*Tokens, map[string]string) {
	t.Helper()
	tokens := map[string]string{}
	var lines []string
	for _, who := range []struct{ name, role, agent string }{
		{"alice", "agent", "alice"}, {"bob", "agent", "bob"}, {"worker", "worker", ""}, {"admin", "admin", ""},
	} {
		token, line, err := GenerateToken(who.role, who.agent)
		require.NoError(t, err)
		tokens[who.name] = token
		lines = append(lines, line)
	}
	set, err := LoadTokens("", strings.Join(lines, ";"))
	require.NoError(t, err)
	return set, tokens
}

func newBundle(t testing.TB, st store.Store, sc *streams.Client) *bundle {
	t.Helper()
	cfg := testConfig(t)
	b := newStack(st, sc, cfg, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	settleAtEnd(t, b.eng)
	set, tokens := testTokens(t)
	b.srv, b.tokens = New(b.with(Options{Auth: AuthOptions{Tokens: set}, Logger: slog.New(slog.DiscardHandler)})), tokens
	return b
}

// newStack is a bundle without its server: an engine over st and sc with a lease manager of
// its own, as the orchestrator wires them.
func newStack(st store.Store, sc *streams.Client, cfg *config.Config, eo engine.Options) *bundle {
	eo.Leases = engine.NewLeaseManager(st, cfg, leases.Options{Now: eo.Now, Logger: eo.Logger})
	return &bundle{eng: engine.New(st, sc, cfg, eo), st: st, sc: sc, lm: eo.Leases, cfg: cfg}
}

// with is o over the bundle's engine and backends (o's Config, when set, wins).
func (b *bundle) with(o Options) Options {
	o.Engine, o.Store, o.Leases = b.eng, b.st, b.lm
	if b.sc != nil {
		o.Streams = b.sc
	}
	if o.Config == nil {
		o.Config = b.cfg
	}
	return o
}

// settleAtEnd makes the end of t wait for the publishes of eng's answered submits, which
// follow their answers: one that landed after the test's Redis keys were deleted would leave
// its stream behind. Cleanups run last-registered first, so this one runs before
// testenv.RedisPrefix's.
func settleAtEnd(t testing.TB, eng *engine.Engine) {
	t.Cleanup(func() { eng.FlushMarks(context.Background()) })
}

// setup is the real stack: a fresh migrated MariaDB database and a Redis key prefix.
func setup(t testing.TB) *bundle {
	t.Helper()
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	return newBundle(t, st, streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)}))
}

// setupDown is a stack whose MariaDB and Redis are unreachable: only requests that are answered
// before the engine touches them can succeed.
func setupDown(t *testing.T) *bundle {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	streams.MapErrors(rdb)
	t.Cleanup(func() { _ = rdb.Close() })
	return newBundle(t, downStore{}, streams.New(rdb, streams.Options{}))
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// errDown is what a driver returns when the database refuses connections: the network error,
// marked store.ErrUnavailable.
var errDown = store.Unavailable(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})

// downStore is a database that is down. Methods it does not override panic (the embedded
// interface is nil): the engine reaches them only through WithTx, which fails first.
type downStore struct{ store.Store }

func (downStore) WithTx(context.Context, func(store.Tx) error) error { return errDown }
func (downStore) JobGet(context.Context, string) (store.Job, error) {
	return store.Job{}, errDown
}
func (downStore) JobList(context.Context, store.JobListParams) ([]store.Job, error) {
	return nil, errDown
}
func (downStore) Ping(context.Context) error { return errDown }
func (downStore) SchemaVersion(context.Context) (uint, bool, error) {
	return 0, false, errDown
}

// request sends one request to the bundle's handler. body is a string or []byte sent as is,
// nil for none, or anything else marshalled as JSON. who names a token of the bundle ("" for
// none); any other unknown name is sent as a literal token.
func (b *bundle) request(t *testing.T, method, path, who string, body any) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(v)
	case []byte:
		r = bytes.NewReader(v)
	default:
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		r = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if who != "" {
		token, ok := b.tokens[who]
		if !ok {
			token = who
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	b.srv.Handler().ServeHTTP(rec, req)
	return rec
}

// decode unmarshals a recorded answer.
func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v), "body: %s", rec.Body.String())
	return v
}

// requireError checks an error answer: status, code and (when not empty) field.
func requireError(t *testing.T, rec *httptest.ResponseRecorder, status int, code, field string) wire.ErrorDetail {
	t.Helper()
	require.Equal(t, status, rec.Code, "body: %s", rec.Body.String())
	require.Equal(t, "application/json; charset=utf-8", rec.Header().Get("Content-Type"))
	body := decode[wire.ErrorBody](t, rec)
	require.Equal(t, code, body.Error.Code, "body: %s", rec.Body.String())
	require.Equal(t, field, body.Error.Field, "body: %s", rec.Body.String())
	require.NotEmpty(t, body.Error.Message)
	return body.Error
}

// submitJob submits a job for agent through the engine and returns its id.
func (b *bundle) submitJob(t *testing.T, agent string) string {
	t.Helper()
	job, created, err := b.eng.Submit(context.Background(), engine.SubmitParams{
		Type: "noop", Agent: agent, Payload: json.RawMessage(`{}`), Actor: "agent:" + agent,
	})
	require.NoError(t, err)
	require.True(t, created)
	return job.ID
}

// countJobs counts the jobs of an agent.
func (b *bundle) countJobs(t *testing.T, agent string) int {
	t.Helper()
	jobs, err := b.st.JobList(context.Background(), store.JobListParams{Agent: agent, Limit: 1000})
	require.NoError(t, err)
	return len(jobs)
}
