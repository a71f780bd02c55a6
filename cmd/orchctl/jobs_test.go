package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/engine"
)

func TestJobsSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("Flags", func(t *testing.T) {
		t.Parallel()
		r := b.runOK(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--payload", `{"n": 1}`,
			"--job-id", "submit-flags", "--max-attempts", "2", "--timeout", "45s")
		require.Equal(t, []string{"submit-flags", "pending", "created"}, tableRows(t, r.stdout)[0], "%s", r)
		job := b.get(t, "submit-flags")
		require.Equal(t, "noop", job.Type)
		require.Equal(t, "ops", job.Agent)
		require.JSONEq(t, `{"n": 1}`, string(job.Payload))
		require.Equal(t, 2, job.MaxAttempts)
		require.Equal(t, 45*time.Second, job.Timeout)
	})

	t.Run("Resources", func(t *testing.T) {
		t.Parallel()
		b.runOK(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--job-id", "submit-gpus",
			"--gpus", "2", "--gpu-memory-mb", "1000", "--exclusive")
		job := b.get(t, "submit-gpus")
		require.Equal(t, 1000, job.GPUMemoryMB)
		require.Equal(t, 2, job.GPUs)
		require.True(t, job.GPUExclusive)
		r := b.run(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--gpus", "2")
		require.NotEqual(t, exitOK, r.code)
		require.Contains(t, r.stderr, "resources.gpu_memory_mb", "%s", r)
	})

	t.Run("Why", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "why-cpu", "ops")
		r := b.runOK(t, "jobs", "why", id)
		require.Equal(t, id+" pending: waits for a worker of type noop to read it\n", r.stdout)

		b.runOK(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--job-id", "why-gpu", "--gpu-memory-mb", "1000")
		res, err := b.eng.Claim(t.Context(), engine.ClaimParams{WorkerID: "w1", NodeID: "why-nowhere",
			Items: []engine.ClaimItem{{JobID: "why-gpu"}}})
		require.NoError(t, err)
		require.Len(t, res.Refused, 1)
		r = b.runOK(t, "jobs", "why", "why-gpu")
		require.Contains(t, r.stdout, `why-gpu pending: waits for a place: the node of the worker that read it could not take it (node_unknown: node "why-nowhere" has reported no GPU`)
		require.Contains(t, b.runOK(t, "jobs", "get", "why-gpu").stdout, "1000 MB on 1 GPU")

		b.done(t, id, `{}`)
		require.Contains(t, b.runOK(t, "jobs", "why", id).stdout, id+" done: finished ")
	})

	t.Run("PayloadFromStdin", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, `{"from": "stdin", "list": [1, 2]}`, "--api-url", b.url, "--token", b.admin,
			"jobs", "submit", "--type", "noop", "--agent", "ops", "--payload-file", "-", "-o", "json")
		require.Equal(t, exitOK, r.code, "%s", r)
		resp := decodeJSON[client.SubmitResponse](t, r)
		require.True(t, resp.Created)
		require.Equal(t, "pending", resp.Status)
		require.JSONEq(t, `{"from": "stdin", "list": [1, 2]}`, string(b.get(t, resp.JobID).Payload))
	})

	t.Run("PayloadFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "payload.json")
		require.NoError(t, os.WriteFile(path, []byte(`["a", "b"]`), 0o600))
		r := b.runOK(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--payload-file", path, "-q")
		id := strings.TrimSpace(r.stdout)
		require.Equal(t, id+"\n", r.stdout, "--quiet prints the id only")
		require.JSONEq(t, `["a", "b"]`, string(b.get(t, id).Payload))
	})

	t.Run("DefaultPayload", func(t *testing.T) {
		t.Parallel()
		r := b.runOK(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "-q")
		require.JSONEq(t, `{}`, string(b.get(t, strings.TrimSpace(r.stdout)).Payload))
	})

	t.Run("RepeatedJobIDSaysExisting", func(t *testing.T) {
		t.Parallel()
		args := []string{"jobs", "submit", "--type", "noop", "--agent", "ops", "--job-id", "submit-twice"}
		r := b.runOK(t, args...)
		require.Equal(t, []string{"submit-twice", "pending", "created"}, tableRows(t, r.stdout)[0], "%s", r)
		b.done(t, "submit-twice", `{}`)

		r = b.runOK(t, args...)
		require.Equal(t, []string{"submit-twice", "done", "exists"}, tableRows(t, r.stdout)[0], "%s", r)
		resp := decodeJSON[client.SubmitResponse](t, b.runOK(t, append(args, "-o", "json")...))
		require.Equal(t, client.SubmitResponse{JobID: "submit-twice", Status: "done", Created: false}, resp)
	})

	t.Run("InvalidPayloadIsUsageError", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--payload", `{"n":`)
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "orchctl: --payload is not valid JSON")
		require.Contains(t, r.stderr, "Run 'orchctl jobs submit --help' for usage.")

		r = b.run(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--payload-file", filepath.Join(t.TempDir(), "missing.json"))
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "--payload-file: open ")
	})

	t.Run("RefusedByAPIShowsField", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, "jobs", "submit", "--type", "no-such-type", "--agent", "ops")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, `orchctl: submit job: 400 invalid_request: unknown job type "no-such-type" (configured: inference, ingest, noop, preload, sleep); a type is configured under job_types in the configuration file named by ORCH_CONFIG (see docs/configuration.md#job-types) (field type)`)

		r = b.run(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--max-attempts", "0")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "(field max_attempts)")
	})

	t.Run("Wait", func(t *testing.T) {
		t.Parallel()
		results := make(chan result, 1)
		go func() {
			results <- b.run(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--job-id", "submit-wait",
				"--wait", "--poll", "20ms", "--wait-timeout", "1m", "-o", "json")
		}()
		require.Eventually(t, func() bool {
			_, err := b.eng.Get(t.Context(), "submit-wait")
			return err == nil
		}, 30*time.Second, 10*time.Millisecond)
		b.done(t, "submit-wait", `{"answer": 42}`)

		r := <-results
		require.Equal(t, exitOK, r.code, "%s", r)
		list := decodeJSON[client.JobList](t, r)
		require.Len(t, list.Jobs, 1)
		require.Equal(t, "done", list.Jobs[0].Status)
		require.JSONEq(t, `{"answer": 42}`, string(list.Jobs[0].Result))
	})
}

func TestJobsGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "get-me", "ops")
	long := `{"text": "` + strings.Repeat("x", 500) + `"}`
	b.done(t, id, long)

	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		r := b.runOK(t, "jobs", "get", id)
		fields := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			k, v, ok := strings.Cut(line, "  ")
			require.True(t, ok, "line %q", line)
			fields[k] = strings.TrimSpace(v)
		}
		require.Equal(t, "get-me", fields["JOB ID"])
		require.Equal(t, "done", fields["STATUS"])
		require.Equal(t, "1/3", fields["ATTEMPTS"], "%s", r)
		require.Equal(t, "w1", fields["WORKER"])
		require.Equal(t, "-", fields["LAST ERROR"])
		require.Contains(t, fields["FINISHED"], " ago)")
		require.Regexp(t, `^\{"text": ?"x+… \(\d+ bytes; -o json shows all\)$`, fields["RESULT"])
		require.Less(t, len(fields["RESULT"]), 300, "the result is cut in the table")
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		job := decodeJSON[client.Job](t, b.runOK(t, "jobs", "get", id, "-o", "json"))
		require.Equal(t, "get-me", job.JobID)
		require.Equal(t, "done", job.Status)
		require.JSONEq(t, long, string(job.Result))
		require.NotNil(t, job.FinishedAt)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, "jobs", "get", "no-such-job")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Equal(t, "orchctl: get job no-such-job: 404 not_found: no job \"no-such-job\"\n", r.stderr)
		require.Empty(t, r.stdout)
	})
}

func TestJobsCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("Pending", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "cancel-pending", "ops")
		r := b.runOK(t, "jobs", "cancel", id)
		require.Equal(t, []string{"cancel-pending", "cancelled", "0/3", "-"}, tableRows(t, r.stdout)[0], "%s", r)
		require.Equal(t, "cancelled", string(b.get(t, id).Status))

		r = b.run(t, "jobs", "cancel", id)
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "orchctl: cancel job cancel-pending: 409 job_terminal: job is in a terminal state: cancelled\n")
		require.Equal(t, 1, strings.Count(r.stderr, "cancel job"), "each layer says it once: %s", r.stderr)
	})

	t.Run("RunningJSON", func(t *testing.T) {
		t.Parallel()
		id := b.submit(t, "cancel-claimed", "ops")
		b.claim(t, id)
		job := decodeJSON[client.Job](t, b.runOK(t, "jobs", "cancel", id, "-o", "json"))
		require.Equal(t, "cancelled", job.Status)
		require.Equal(t, 1, job.Attempts)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, "jobs", "cancel", "nope")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "404 not_found")
	})
}

func TestJobsSubmitPayloadRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A payload with characters a shell or a table could mangle comes back as sent.
	payload := `{"cmd": "<a & b>", "tab": "x\ty", "unicode": "ü"}`
	r := b.runOK(t, "jobs", "submit", "--type", "noop", "--agent", "ops", "--payload", payload, "-q")
	job := decodeJSON[client.Job](t, b.runOK(t, "jobs", "get", strings.TrimSpace(r.stdout), "-o", "json"))
	require.JSONEq(t, payload, string(job.Payload))
	var v map[string]string
	require.NoError(t, json.Unmarshal(job.Payload, &v))
	require.Equal(t, "x\ty", v["tab"])
}
