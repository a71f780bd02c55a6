package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/store"
)

// jobLines is n noop jobs of agent as JSON Lines, with ids prefix-0, prefix-1, ...
func jobLines(n int, prefix, agent string) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, `{"job_id": "%s-%d", "type": "noop", "agent": %q, "payload": {"n": %d}}`+"\n", prefix, i, agent, i)
	}
	return sb.String()
}

// writeFile writes content to a file of the test's and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestJobsSubmitBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("JSONLinesInChunks", func(t *testing.T) {
		t.Parallel()
		n := submitBatchChunk + submitBatchChunk/2 // two requests
		path := writeFile(t, "jobs.jsonl", jobLines(n, "lines", "bulk"))
		r := b.runOK(t, "jobs", "submit-batch", "--file", path)
		require.Equal(t, [][]string{{"1500", "1500", "0", "0"}}, tableRows(t, r.stdout), "%s", r)
		require.Empty(t, r.stderr)
		count, err := b.st.JobCountUnfinished(t.Context(), "bulk", 2*n)
		require.NoError(t, err)
		require.Equal(t, n, count)
		for _, i := range []int{0, 999, 1000, 1234, n - 1} {
			job := b.get(t, fmt.Sprintf("lines-%d", i))
			require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, i), string(job.Payload))
		}

		r = b.runOK(t, "jobs", "submit-batch", "--file", path)
		require.Equal(t, [][]string{{"1500", "0", "1500", "0"}}, tableRows(t, r.stdout), "sent again: %s", r)
	})

	t.Run("ArrayFromStdinAsJSON", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, `[{"job_id": "arr-1", "type": "noop", "agent": "ops", "payload": 1},
			{"type": "noop", "agent": "ops", "payload": 2, "max_attempts": 5, "timeout": "90s"}]`,
			"--api-url", b.url, "--token", b.admin, "jobs", "submit-batch", "-f", "-", "-o", "json")
		require.Equal(t, exitOK, r.code, "%s", r)
		resp := decodeJSON[client.SubmitBatchResponse](t, r)
		require.Equal(t, 2, resp.Created)
		require.Len(t, resp.Results, 2)
		require.Equal(t, client.SubmitBatchResult{JobID: "arr-1", Status: "pending", Created: true}, resp.Results[0])
		job := b.get(t, resp.Results[1].JobID)
		require.Equal(t, 5, job.MaxAttempts)
		require.JSONEq(t, `2`, string(job.Payload))
	})

	t.Run("WrappedObject", func(t *testing.T) {
		t.Parallel()
		path := writeFile(t, "batch.json", `{"jobs": [
			{"job_id": "wrap-1", "type": "noop", "agent": "ops", "payload": {}}
		]}`)
		r := b.runOK(t, "jobs", "submit-batch", "--file", path)
		require.Equal(t, [][]string{{"1", "1", "0", "0"}}, tableRows(t, r.stdout), "%s", r)
		require.Equal(t, "ops", b.get(t, "wrap-1").Agent)
	})

	t.Run("FailedJobsAreNamed", func(t *testing.T) {
		t.Parallel()
		b.submit(t, "named-old", "ops")
		path := writeFile(t, "jobs.jsonl", `{"job_id": "named-new", "type": "noop", "agent": "ops", "payload": {}}
{"job_id": "named-bad", "type": "rm_rf", "agent": "ops", "payload": {}}
{"job_id": "named-old", "type": "noop", "agent": "ops", "payload": {}}
{"type": "noop", "agent": "ops", "payload": {}, "max_attempts": 0}
`)
		r := b.run(t, "jobs", "submit-batch", "--file", path)
		require.Equal(t, exitPartial, r.code, "%s", r)
		require.Equal(t, [][]string{{"4", "1", "1", "2"}}, tableRows(t, r.stdout), "%s", r)
		require.Contains(t, r.stderr, `orchctl: job 2 (named-bad): invalid_request: unknown job type "rm_rf" (configured: inference, ingest, noop, preload, sleep); a type is configured under job_types in the configuration file named by ORCH_CONFIG (see docs/configuration.md#job-types) (field type)`+"\n")
		require.Contains(t, r.stderr, `orchctl: job 4: invalid_request: must be in 1..100 (field max_attempts)`+"\n")
		require.Contains(t, r.stderr, "orchctl: submit jobs: 2 of 4 failed (named above); the others succeeded\n")
		require.Equal(t, "pending", string(b.get(t, "named-new").Status))
	})

	t.Run("EveryJobFailed", func(t *testing.T) {
		t.Parallel()
		path := writeFile(t, "jobs.jsonl", `{"type": "rm_rf", "agent": "ops", "payload": {}}`)
		r := b.run(t, "jobs", "submit-batch", "--file", path)
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "orchctl: submit jobs: every one of 1 failed (named above)\n")
	})

	t.Run("AgentTokenSubmitsForItsAgentOnly", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, `{"job_id": "tok-own", "type": "noop", "payload": {}}
{"job_id": "tok-other", "type": "noop", "agent": "bob", "payload": {}}`,
			"--api-url", b.url, "--token", b.alice, "jobs", "submit-batch", "--file", "-")
		require.Equal(t, exitPartial, r.code, "%s", r)
		require.Contains(t, r.stderr, `orchctl: job 2 (tok-other): forbidden: this token submits for agent "alice" only`)
		require.Equal(t, "alice", b.get(t, "tok-own").Agent)
	})

	t.Run("MalformedFileSendsNothing", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct{ name, content, stderr string }{
			{"UnknownField", `{"job_id": "mal-1", "type": "noop", "agent": "ops", "payload": {}}` + "\n\n" +
				`{"job_id": "mal-2", "type": "noop", "agent": "ops", "payload": {}, "priorty": 1}`,
				`job 2 (line 3): json: unknown field "priorty"`},
			{"SyntaxError", `{"job_id": "mal-3", "type": "noop", "agent": "ops", "payload": {}}` + "\n" + `{"type": "noop",, }`,
				"line 2: not valid JSON"},
			{"WrongType", `[{"job_id": "mal-4", "type": "noop", "agent": "ops", "payload": {}}, {"max_attempts": "3"}]`,
				"job 2 (line 1): json: cannot unmarshal string into Go struct field SubmitRequest.max_attempts of type int"},
			{"NotAnObject", `[{"job_id": "mal-5", "type": "noop", "agent": "ops", "payload": {}}, 7]`,
				"job 2 (line 1): want a JSON object, not number"},
			{"Truncated", `{"jobs": [{"job_id": "mal-6", "type": "noop", "agent": "ops", "payload": {}}`, "ends too early"},
			{"OtherKey", `{"jobs": [], "atomic": true}`, `want "}", not atomic`},
			{"MissingPayload", `{"job_id": "mal-7", "type": "noop", "agent": "ops"}`,
				`job 1 (line 1): "payload" is required (any JSON value, null included)`},
			{"Empty", " \n", "holds no jobs"},
			{"EmptyArray", "[]", "holds no jobs"},
		} {
			path := writeFile(t, c.name+".json", c.content)
			r := b.run(t, "jobs", "submit-batch", "--file", path)
			require.Equal(t, exitUsage, r.code, "%s: %s", c.name, r)
			require.Contains(t, r.stderr, c.stderr, "%s", c.name)
			require.Contains(t, r.stderr, "Run 'orchctl jobs submit-batch --help' for usage.")
			require.Empty(t, r.stdout)
		}
		for i := 1; i <= 7; i++ {
			_, err := b.eng.Get(t.Context(), fmt.Sprintf("mal-%d", i))
			require.ErrorIs(t, err, store.ErrNotFound, "mal-%d was not sent", i)
		}

		r := b.run(t, "jobs", "submit-batch", "--file", filepath.Join(t.TempDir(), "missing.jsonl"))
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "--file: open ")
		r = b.run(t, "jobs", "submit-batch")
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, `required flag(s) "file" not set`)
	})

	t.Run("NoToken", func(t *testing.T) {
		t.Parallel()
		path := writeFile(t, "jobs.jsonl", jobLines(1, "notoken", "ops"))
		r := orchctl(t, "", "--api-url", b.url, "jobs", "submit-batch", "--file", path)
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "401 unauthorized")
		require.Contains(t, r.stderr, "hint: no API token was sent")
	})
}

// TestJobsSubmitBatchStopsAtAFailedRequest: a request that fails after others succeeded ends the
// run; the jobs from it on are counted failed, and named once.
func TestJobsSubmitBatchStopsAtAFailedRequest(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var req client.SubmitBatchRequest
		if calls.Add(1) > 1 || json.NewDecoder(r.Body).Decode(&req) != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error": {"code": "unavailable", "message": "retry later"}}`))
			return
		}
		resp := client.SubmitBatchResponse{Created: len(req.Jobs)}
		for _, j := range req.Jobs {
			resp.Results = append(resp.Results, client.SubmitBatchResult{JobID: j.JobID, Status: "pending", Created: true})
		}
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(ts.Close)

	n := submitBatchChunk + 500
	path := writeFile(t, "jobs.jsonl", jobLines(n, "stop", "ops"))
	r := orchctl(t, "", "--api-url", ts.URL, "--token", "t", "jobs", "submit-batch", "--file", path)
	require.Equal(t, exitPartial, r.code, "%s", r)
	require.Equal(t, [][]string{{"1500", "1000", "0", "500"}}, tableRows(t, r.stdout), "%s", r)
	require.Contains(t, r.stderr, "orchctl: jobs 1001 to 1500: submit batch of jobs: 503 unavailable: retry later; "+
		"stopped: jobs 1001 to 1500 not submitted\n")
	require.Contains(t, r.stderr, "orchctl: submit jobs: 500 of 1500 failed (named above); the others succeeded\n")
	require.EqualValues(t, 2, calls.Load(), "no request after the failed one")

	t.Run("FirstRequestFails", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "--api-url", ts.URL, "--token", "t", "jobs", "submit-batch", "--file", path)
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Equal(t, "orchctl: submit batch of jobs: 503 unavailable: retry later\n", r.stderr)
		require.Empty(t, r.stdout)
	})
}
