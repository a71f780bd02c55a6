package api

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// FuzzSubmit sends arbitrary bodies to POST /jobs/submit on the real stack, as an agent and as
// an admin: the answer is never a 5xx and never a panic, is always JSON, and a 400 names a code.
// CI runs it for a bounded time (make fuzz); the seeds run with every go test.
func FuzzSubmit(f *testing.F) {
	for _, seed := range []string{
		`{"type":"noop","agent":"alice","payload":{}}`,
		`{"job_id":"a.b:c-d_e","type":"sleep","agent":"alice","payload":{"ms":1},"max_attempts":3,"timeout":"2s"}`,
		`{"type":"noop","agent":"alice","payload":null,"timeout":1.5}`,
		`{"type":"noop","agent":"bob","payload":[]}`,
		`{"type":"noop","agent":"alice","payload":{},"extra":1}`,
		`{"type":"noop","agent":"alice","payload":{}} trailing`,
		`{"type":"noop","agent":"alice","payload":"\u0000"}`,
		`{"job_id":"` + "\u00e9" + `","type":"noop","agent":"alice","payload":{}}`,
		`{"type":7}`, `[]`, `null`, ``, `{`, `{"timeout":"-5s"}`, `{"max_attempts":1e99}`,
		// Strictness (issue 25): invalid UTF-8, lone surrogates, nesting, duplicate and
		// case-mismatched keys, dot ids, durations that overflow.
		"{\"type\":\"noop\",\"agent\":\"alice\",\"payload\":\"\xff\"}",
		"{\"type\":\"noop\",\"agent\":\"alice\",\"payload\":{\"\xc3\":1}}",
		`{"type":"noop","agent":"alice","payload":"\ud800"}`,
		`{"type":"noop","agent":"alice","payload":` + deepJSON(MaxJSONDepth) + `}`,
		`{"type":"noop","agent":"alice","payload":` + deepJSON(1001) + `}`,
		`{"type":"noop","agent":"alice","payload":{"a":1,"a":2}}`,
		`{"type":"noop","type":"sleep","agent":"alice","payload":{}}`,
		`{"Type":"noop","agent":"alice","payload":{}}`,
		`{"job_id":"..","type":"noop","agent":"alice","payload":{}}`,
		`{"type":"noop","agent":"alice","payload":{},"timeout":18446744074}`,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	b := setup(f)
	f.Fuzz(func(t *testing.T, body string, admin bool) {
		who := "alice"
		if admin {
			who = "admin"
		}
		rec := b.request(t, http.MethodPost, "/jobs/submit", who, body)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		switch rec.Code {
		case http.StatusOK, http.StatusAccepted:
			var resp wire.SubmitResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.JobID == "" {
				t.Fatalf("status %d with a bad body %q: %v", rec.Code, rec.Body.String(), err)
			}
		case http.StatusBadRequest, http.StatusForbidden, http.StatusConflict, http.StatusRequestEntityTooLarge:
			var eb wire.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
				t.Fatalf("status %d with a bad error body %q: %v", rec.Code, rec.Body.String(), err)
			}
		default:
			t.Fatalf("unexpected status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
	})
}

// FuzzLeaseRequest sends arbitrary bodies to POST /leases as an agent: never a 5xx, never a
// panic, and every refusal is a JSON error with a code.
func FuzzLeaseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"agent":"alice","min_memory_mb":1024,"ttl_seconds":30,"mode":"gpu"}`,
		`{"min_memory_mb":0,"mode":"cpu"}`,
		`{"agent":"alice","node_id":"n1","min_memory_mb":-5,"mode":"gpu","exclusive":true}`,
		`{"mode":"tpu"}`, `{"ttl_seconds":1e12}`, `{"agent":"bob","mode":"cpu"}`, `{}`, `[]`, ``, `{`,
		// Strictness and overflow (issue 25).
		`{"mode":"cpu","ttl_seconds":9223372037}`, `{"mode":"cpu","ttl_seconds":18446744074}`,
		"{\"mode\":\"cpu\",\"metadata\":{\"k\":\"\xff\"}}",
		`{"mode":"cpu","metadata":{"k":"\udc00"}}`,
		`{"mode":"cpu","metadata":` + deepObject(MetadataMaxDepth+1) + `}`,
		`{"mode":"cpu","metadata":` + deepObject(40) + `}`,
		`{"mode":"cpu","mode":"gpu"}`, `{"Mode":"cpu"}`, `{"mode":"cpu","metadata":{"a":1,"a":2}}`,
	} {
		f.Add(seed)
	}
	b := setup(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := b.request(t, http.MethodPost, "/leases", "alice", body)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		if rec.Code >= 400 {
			var eb wire.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" {
				t.Fatalf("status %d with a bad error body %q: %v", rec.Code, rec.Body.String(), err)
			}
		}
	})
}

// FuzzSubmitStore sends arbitrary bodies to POST /jobs/submit on a stack whose engine writes to
// the embedded mode's store (SQLite, a temporary file): what the decoder accepts, the database
// must store. Never a 5xx (a 500 is a database refusing what the decoder let through, as
// SQLite's json_valid did a payload nested 1,001 deep), and a created job reads back with a
// payload that is valid JSON and valid UTF-8. Each input costs one SQLite commit (no fsync).
func FuzzSubmitStore(f *testing.F) {
	for _, seed := range []string{
		`{"type":"noop","agent":"alice","payload":{"a":[1,2,{"b":null}]}}`,
		`{"type":"noop","agent":"alice","payload":"\u00e9\ud83d\ude00"}`,
		"{\"type\":\"noop\",\"agent\":\"alice\",\"payload\":\"\xff\"}",
		`{"type":"noop","agent":"alice","payload":"\ud800"}`,
		`{"type":"noop","agent":"alice","payload":` + deepJSON(MaxJSONDepth-1) + `}`,
		`{"type":"noop","agent":"alice","payload":` + deepJSON(1001) + `}`,
		`{"type":"noop","agent":"alice","payload":{"a":1,"a":2}}`,
		`{"job_id":"same","type":"noop","agent":"alice","payload":1}`,
		`{"job_id":"same","type":"noop","agent":"alice","payload":2}`,
		`{"type":"noop","agent":"alice","payload":1e400}`,
	} {
		f.Add(seed)
	}
	b := setupSQLiteAPI(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := b.request(t, http.MethodPost, "/jobs/submit", "admin", body)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		if rec.Code != http.StatusAccepted {
			return
		}
		var resp wire.SubmitResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
		got := b.request(t, http.MethodGet, "/jobs/"+resp.JobID, "admin", nil)
		require.Equal(t, http.StatusOK, got.Code, got.Body.String())
		require.True(t, utf8.Valid(got.Body.Bytes()), "the job reads back as invalid UTF-8: %q", got.Body.String())
		var job wire.Job
		require.NoError(t, json.Unmarshal(got.Body.Bytes(), &job), "the job reads back as invalid JSON: %q", got.Body.String())
		require.True(t, json.Valid(job.Payload), "payload %q", job.Payload)
	})
}

// setupSQLiteAPI is the stack on the embedded mode's store: a migrated SQLite file in a
// temporary directory (synchronous OFF: no crash is tested here) and the real Redis.
func setupSQLiteAPI(t testing.TB) *bundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), sqlite.DBFileName)
	_, _, err := db.MigrateSQLite(context.Background(), path, db.CmdUp, nil)
	require.NoError(t, err)
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "OFF"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	return newBundle(t, st, streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)}))
}
