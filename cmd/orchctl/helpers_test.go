package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// bundle is a real orchestrator API (fresh MariaDB database, own Redis prefix) served over
// HTTP, with an admin token and an agent token for agent "alice".
type bundle struct {
	url   string
	admin string
	alice string
	eng   *engine.Engine
	st    store.Store
	opts  api.Options // of the server, for a second server with other readiness checks
}

// apiOptions are the options of an API server over st and sc, as the orchestrator wires it:
// the engine, the lease manager and the backends the API reads.
func apiOptions(st store.Store, sc *streams.Client, cfg *config.Config, log *slog.Logger) api.Options {
	lm := engine.NewLeaseManager(st, cfg, leases.Options{Logger: log})
	eng := engine.New(st, sc, cfg, engine.Options{Logger: log, Leases: lm})
	return api.Options{Engine: eng, Config: cfg, Store: st, Streams: sc, Leases: lm, Logger: log}
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	opts := apiOptions(st, sc, cfg, log)

	admin, adminLine, err := api.GenerateToken(string(api.RoleAdmin), "")
	require.NoError(t, err)
	alice, aliceLine, err := api.GenerateToken(string(api.RoleAgent), "alice")
	require.NoError(t, err)
	tokens, err := api.LoadTokens("", adminLine+";"+aliceLine)
	require.NoError(t, err)

	opts.Auth = api.AuthOptions{Tokens: tokens}
	b := &bundle{admin: admin, alice: alice, eng: opts.Engine, st: st, opts: opts}
	b.url = serve(t, b.opts)
	return b
}

// serve starts an API server with opts and returns its URL.
func serve(t *testing.T, opts api.Options) string {
	t.Helper()
	ts := httptest.NewServer(api.New(opts).Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

// result is what one orchctl run left behind.
type result struct {
	code   int
	stdout string
	stderr string
}

// String makes failed assertions show the whole run.
func (r result) String() string {
	return "exit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.stdout + "stderr:\n" + r.stderr
}

// orchctl runs the CLI in-process through run, with stdin as standard input.
func orchctl(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// run runs orchctl against the bundle's API with the admin token.
func (b *bundle) run(t *testing.T, args ...string) result {
	t.Helper()
	return orchctl(t, "", append([]string{"--api-url", b.url, "--token", b.admin}, args...)...)
}

// runOK runs orchctl against the bundle and requires exit code 0.
func (b *bundle) runOK(t *testing.T, args ...string) result {
	t.Helper()
	r := b.run(t, args...)
	require.Equal(t, exitOK, r.code, "%s", r)
	return r
}

// submit creates a noop job through the engine and returns its id.
func (b *bundle) submit(t *testing.T, id, agent string) string {
	t.Helper()
	job, created, err := b.eng.Submit(context.Background(), engine.SubmitParams{
		JobID: id, Type: "noop", Agent: agent, Payload: json.RawMessage(`{}`), Actor: "test",
	})
	require.NoError(t, err)
	require.True(t, created)
	// A submit is answered at its commit, before its entry is published: wait for the publish,
	// so that the job's queue shows it.
	b.eng.FlushMarks(context.Background())
	return job.ID
}

// claim claims a pending job as worker w1, the way a worker would after reading its entry.
func (b *bundle) claim(t *testing.T, id string) store.Job {
	t.Helper()
	res, err := b.eng.Claim(context.Background(), engine.ClaimParams{
		WorkerID: "w1", Items: []engine.ClaimItem{{JobID: id}},
	})
	require.NoError(t, err)
	require.Len(t, res.Claimed, 1, "refused: %+v", res.Refused)
	return res.Claimed[0]
}

// finish claims a job and reports the attempt's result r (JobID, Attempt and LeaseToken are
// filled in), returning the outcome.
func (b *bundle) finish(t *testing.T, id string, r engine.Result) string {
	t.Helper()
	job := b.claim(t, id)
	r.JobID, r.Attempt, r.LeaseToken = job.ID, job.Attempts, job.LeaseToken
	res, err := b.eng.Complete(context.Background(), engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{r}})
	require.NoError(t, err)
	require.Len(t, res.Outcomes, 1)
	return res.Outcomes[0].Outcome
}

// done claims a job and completes it successfully with output.
func (b *bundle) done(t *testing.T, id, output string) {
	t.Helper()
	require.Equal(t, engine.OutcomeDone, b.finish(t, id, engine.Result{Done: true, Output: json.RawMessage(output)}))
}

// deadLetter claims a job and fails it with a non-retryable error.
func (b *bundle) deadLetter(t *testing.T, id, msg string) {
	t.Helper()
	require.Equal(t, engine.OutcomeDeadLetter, b.finish(t, id, engine.Result{Error: msg, NonRetryable: true}))
}

// get reads a job straight from the engine.
func (b *bundle) get(t *testing.T, id string) store.Job {
	t.Helper()
	job, err := b.eng.Get(context.Background(), id)
	require.NoError(t, err)
	return job
}

// decodeJSON parses one JSON document of orchctl's stdout, rejecting unknown fields (the
// document must be the API's shape) and trailing data (it must be one document).
func decodeJSON[T any](t *testing.T, r result) T {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	var v T
	require.NoError(t, dec.Decode(&v), "%s", r)
	require.False(t, dec.More(), "more than one JSON document: %s", r)
	return v
}

// tableRows returns the data rows of a table on stdout (the header dropped), split in columns.
func tableRows(t *testing.T, stdout string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	require.NotEmpty(t, lines)
	rows := make([][]string, 0, len(lines)-1)
	for _, l := range lines[1:] {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// closedURL returns the URL of a loopback port where nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}
