package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/wire"
)

func TestNoopHandler(t *testing.T) {
	t.Parallel()
	out, err := NoopHandler{}.Run(context.Background(), Job{ID: "x"})
	require.NoError(t, err)
	require.JSONEq(t, `{}`, string(out))
}

func TestSleepHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Sleeps", func(t *testing.T) {
		t.Parallel()
		out, err := SleepHandler{}.Run(ctx, Job{Payload: json.RawMessage(`{"ms": 1}`)})
		require.NoError(t, err)
		require.JSONEq(t, `{"slept_ms":1}`, string(out))
	})

	t.Run("BadPayloadNamesField", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{`{}`, `{"ms": -1}`, `{"ms": 1.5}`, `{"ms": "x"}`, `{"ms": 86400001}`, `[1]`, `nope`, ``} {
			_, err := SleepHandler{}.Run(ctx, Job{Payload: json.RawMessage(p)})
			require.Error(t, err, p)
			require.True(t, IsNonRetryable(err), p)
			require.Contains(t, err.Error(), `"ms"`, p)
		}
	})

	t.Run("HonoursContext", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := SleepHandler{}.Run(ctx, Job{Payload: json.RawMessage(`{"ms": 86400000}`)})
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, IsNonRetryable(err))
	})
}

func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	type seen struct {
		body, jobID, attempt, contentType string
	}
	got := make(chan seen, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{string(b), r.Header.Get("X-Orch-Job-Id"), r.Header.Get("X-Orch-Attempt"), r.Header.Get("Content-Type")}
		switch r.URL.Path {
		case "/json":
			_, _ = io.WriteString(w, `{"answer":42}`)
		case "/text":
			_, _ = io.WriteString(w, "plain words, and more")
		case "/bad":
			http.Error(w, "payload rejected", http.StatusBadRequest)
		case "/busy":
			http.Error(w, "slow down", http.StatusTooManyRequests)
		default:
			http.Error(w, "exploded", http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	types := map[string]*config.JobType{"none": {Name: "none", Handler: "http"}}
	for _, p := range []string{"json", "text", "bad", "busy", "boom"} {
		types[p] = &config.JobType{Name: p, Handler: "http", URL: srv.URL + "/" + p}
	}
	types["down"] = &config.JobType{Name: "down", Handler: "http", URL: closed.URL}
	h := NewHTTPHandler(HTTPConfig{JobTypes: types, MaxResponseBytes: 13, Logger: testLogger()})
	run := func(typ string) (json.RawMessage, error) {
		return h.Run(context.Background(), Job{ID: "job-7", Type: typ, Attempt: 2, Payload: json.RawMessage(`{"q":1}`)})
	}

	// Subtests share the server's channel, so they run in order.
	t.Run("JSONAnswer", func(t *testing.T) {
		out, err := run("json")
		require.NoError(t, err)
		require.JSONEq(t, `{"answer":42}`, string(out))
		s := <-got
		require.Equal(t, seen{`{"q":1}`, "job-7", "2", "application/json"}, s)
	})
	t.Run("TextAnswerWrapped", func(t *testing.T) {
		out, err := run("text")
		require.NoError(t, err)
		require.Equal(t, `"plain words, "`, string(out)) // capped at 13 bytes
		<-got
	})
	t.Run("ClientErrorIsFinal", func(t *testing.T) {
		_, err := run("bad")
		require.True(t, IsNonRetryable(err))
		require.ErrorContains(t, err, "400 Bad Request: payload")
		<-got
	})
	t.Run("TooManyRequestsIsRetried", func(t *testing.T) {
		_, err := run("busy")
		require.Error(t, err)
		require.False(t, IsNonRetryable(err))
		<-got
	})
	t.Run("ServerErrorIsRetried", func(t *testing.T) {
		_, err := run("boom")
		require.ErrorContains(t, err, "500 Internal Server Error")
		require.False(t, IsNonRetryable(err))
		<-got
	})
	t.Run("NetworkErrorIsRetried", func(t *testing.T) {
		_, err := run("down")
		require.Error(t, err)
		require.False(t, IsNonRetryable(err))
	})
	t.Run("NoURL", func(t *testing.T) {
		_, err := run("none")
		require.True(t, IsNonRetryable(err))
		require.ErrorContains(t, h.CheckType(types["none"]), "no url")
		require.NoError(t, h.CheckType(types["json"]))
		require.Error(t, h.CheckType(&config.JobType{Name: "x", URL: "ftp://host/x"}))
	})
	t.Run("Timeout", func(t *testing.T) {
		release := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(slow.Close)
		t.Cleanup(func() { close(release) })
		hh := NewHTTPHandler(HTTPConfig{JobTypes: map[string]*config.JobType{"slow": {Name: "slow", URL: slow.URL}}})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := hh.Run(ctx, Job{ID: "j", Type: "slow"})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, IsNonRetryable(err))
	})
}

func TestNonRetryable(t *testing.T) {
	t.Parallel()
	require.Nil(t, NonRetryable(nil))
	base := errors.New("bad input")
	err := fmt.Errorf("run: %w", NonRetryable(base))
	require.True(t, IsNonRetryable(err))
	require.ErrorIs(t, err, base)
	require.Equal(t, "run: bad input", err.Error())
	require.False(t, IsNonRetryable(base))
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := NewBuiltinRegistry(BuiltinOptions{
		JobTypes: map[string]*config.JobType{},
		Commands: map[string]*config.Command{"cat": {Argv: []string{"cat"}}},
	})
	require.Equal(t, []string{"exec", "http", "noop", "sleep"}, r.Names())
	require.NoError(t, r.CheckType(&config.JobType{Name: "a", Handler: "noop"}))
	require.NoError(t, r.CheckType(&config.JobType{Name: "b", Handler: "exec", Command: "cat"}))
	require.ErrorContains(t, r.CheckType(&config.JobType{Name: "c", Handler: "http"}), "job type c: http handler")
	require.ErrorContains(t, r.CheckType(&config.JobType{Name: "d", Handler: "gpu"}), "not registered")
	require.Panics(t, func() { r.Register("noop", NoopHandler{}) })
}

func TestJobEnv(t *testing.T) {
	t.Parallel()
	require.Equal(t, map[string]string{"ORCH_JOB_ID": "j", "ORCH_JOB_ATTEMPT": "1"}, JobEnv(Job{ID: "j", Attempt: 1}))
	require.Equal(t, map[string]string{
		"ORCH_JOB_ID": "j", "ORCH_JOB_ATTEMPT": "1", "ORCH_LEASE_TOKEN": "l", "CUDA_VISIBLE_DEVICES": "",
	}, JobEnv(Job{ID: "j", Attempt: 1, LeaseToken: "l"}), "a CPU lease hides the GPUs")
	gpu := 3
	require.Equal(t, map[string]string{
		"ORCH_JOB_ID": "j", "ORCH_JOB_ATTEMPT": "2", "ORCH_LEASE_TOKEN": "l", "CUDA_VISIBLE_DEVICES": "3",
		"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
	}, JobEnv(Job{ID: "j", Attempt: 2, LeaseToken: "l", GPUIndex: &gpu}), "a GPU lease shows its GPU, in NVML's order")
	parents := []wire.Parent{{JobID: "p", Step: "a", Status: "done", Result: json.RawMessage(`{"x":1}`)}, {JobID: "q", Status: "done", Truncated: true}}
	require.Equal(t, map[string]string{
		"ORCH_JOB_ID": "j", "ORCH_JOB_ATTEMPT": "1",
		"ORCH_PARENTS": `[{"job_id":"p","step":"a","status":"done","result":{"x":1}},{"job_id":"q","status":"done","truncated":true}]`,
	}, JobEnv(Job{ID: "j", Attempt: 1, Parents: parents}), "a job with parents gets them as JSON")
	html := []wire.Parent{{JobID: "p", Status: "done", Result: json.RawMessage(`"<a>&</a>"`)}}
	require.Equal(t, `[{"job_id":"p","status":"done","result":"<a>&</a>"}]`,
		JobEnv(Job{ID: "j", Attempt: 1, Parents: html})["ORCH_PARENTS"], "no HTML escaping: six bytes for each of < > &")
}
