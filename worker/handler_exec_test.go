package worker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

// execHandler returns an ExecHandler with the given commands and a type "run" that lets the
// payload choose, plus a type "fixed" bound to the command "cat".
func execHandler(cmds map[string]*config.Command) *ExecHandler {
	return NewExecHandler(ExecConfig{
		Commands: cmds,
		JobTypes: map[string]*config.JobType{
			"run":   {Name: "run", Handler: "exec"},
			"fixed": {Name: "fixed", Handler: "exec", Command: "cat"},
		},
		KillGrace: 200 * time.Millisecond,
		IOGrace:   100 * time.Millisecond,
		Logger:    testLogger(),
	})
}

func sh(script string, env ...string) *config.Command {
	return &config.Command{Argv: []string{"/bin/sh", "-c", script}, Env: env, MaxOutputBytes: 1 << 20}
}

func execJob(command, extra string) Job {
	return Job{ID: "job-1", Type: "run", Attempt: 2, Payload: json.RawMessage(`{"command":"` + command + `"` + extra + `}`)}
}

func TestExecHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := execHandler(map[string]*config.Command{
		"cat":     {Argv: []string{"cat"}, MaxOutputBytes: 1 << 20},
		"echo":    {Argv: []string{"echo", "hello world"}, MaxOutputBytes: 1 << 20},
		"fail":    sh("echo partial; echo something broke >&2; exit 3"),
		"big":     {Argv: []string{"/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x"}, MaxOutputBytes: 10},
		"bigfail": {Argv: []string{"/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x; exit 1"}, MaxOutputBytes: 10},
		"noisy":   sh("head -c 20000 /dev/zero | tr '\\0' e >&2; echo END >&2; exit 1"),
		"env": sh(`printf '{"id":"%s","attempt":"%s","lease":"%s","cuda":"%s","extra":"%s"}' `+
			`"$ORCH_JOB_ID" "$ORCH_JOB_ATTEMPT" "$ORCH_LEASE_TOKEN" "$CUDA_VISIBLE_DEVICES" "$EXTRA"`, "EXTRA=yes"),
	})

	t.Run("JSONStdoutAndStdinPayload", func(t *testing.T) {
		t.Parallel()
		out, err := h.Run(ctx, execJob("cat", `,"n":[1,2]`))
		require.NoError(t, err)
		require.JSONEq(t, `{"command":"cat","n":[1,2]}`, string(out))
	})

	t.Run("FixedCommandOfType", func(t *testing.T) {
		t.Parallel()
		out, err := h.Run(ctx, Job{ID: "j", Type: "fixed", Payload: json.RawMessage(`{"command":"echo"}`)})
		require.NoError(t, err)
		require.JSONEq(t, `{"command":"echo"}`, string(out)) // cat ran, not echo
	})

	t.Run("NonJSONStdoutWrapped", func(t *testing.T) {
		t.Parallel()
		out, err := h.Run(ctx, execJob("echo", ""))
		require.NoError(t, err)
		require.Equal(t, `"hello world\n"`, string(out))
	})

	t.Run("NonZeroExitCarriesStderr", func(t *testing.T) {
		t.Parallel()
		out, err := h.Run(ctx, execJob("fail", ""))
		require.Error(t, err)
		require.False(t, IsNonRetryable(err))
		require.Contains(t, err.Error(), "exit status 3")
		require.Contains(t, err.Error(), "stderr: something broke")
		require.Equal(t, `"partial\n"`, string(out))
	})

	t.Run("StderrTailOnly", func(t *testing.T) {
		t.Parallel()
		_, err := h.Run(ctx, execJob("noisy", ""))
		require.Error(t, err)
		require.Contains(t, err.Error(), "END")
		require.Less(t, len(err.Error()), ExecStderrTailBytes+200)
	})

	t.Run("OutputCapped", func(t *testing.T) {
		t.Parallel()
		out, err := h.Run(ctx, execJob("big", ""))
		require.NoError(t, err)
		require.Equal(t, `"xxxxxxxxxx"`, string(out))
		_, err = h.Run(ctx, execJob("bigfail", ""))
		require.ErrorContains(t, err, "stdout truncated at 10 bytes")
	})

	t.Run("Env", func(t *testing.T) {
		t.Parallel()
		gpu := 3
		job := execJob("env", "")
		job.LeaseToken, job.GPUIndex = "lease-9", &gpu
		out, err := h.Run(ctx, job)
		require.NoError(t, err)
		require.JSONEq(t, `{"id":"job-1","attempt":"2","lease":"lease-9","cuda":"3","extra":"yes"}`, string(out))
	})

	t.Run("UnknownCommandRefused", func(t *testing.T) {
		t.Parallel()
		for _, payload := range []string{`{"command":"rm"}`, `{}`, `"cat"`, `{"command":"/bin/cat"}`} {
			_, err := h.Run(ctx, Job{ID: "j", Type: "run", Payload: json.RawMessage(payload)})
			require.Error(t, err, payload)
			require.True(t, IsNonRetryable(err), payload)
			require.Contains(t, err.Error(), `payload field "command"`)
		}
	})

	t.Run("ErrorsKeepTheWorkersCommandsPrivate", func(t *testing.T) {
		t.Parallel()
		// A job's error goes to its agent: it names the requested command only, never the
		// names or programs the worker has configured.
		_, err := h.Run(ctx, execJob("rm", ""))
		require.EqualError(t, err, `exec: payload field "command": "rm" is not configured on this worker`)
		for _, name := range []string{"cat", "echo", "bigfail", "noisy"} {
			require.NotContains(t, err.Error(), `"`+name+`"`)
			require.NotContains(t, err.Error(), " "+name)
		}
		long := strings.Repeat("x", 1000)
		_, err = h.Run(ctx, execJob(long, ""))
		require.Less(t, len(err.Error()), 300, "a long requested name is clipped")

		private := execHandler(map[string]*config.Command{"gone": {Argv: []string{"/opt/private-tools/gone-7f3a"}}})
		_, err = private.Run(ctx, execJob("gone", ""))
		require.EqualError(t, err, "exec gone: the command could not be started on this worker (its log says why)")
	})

	t.Run("CheckType", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, h.CheckType(&config.JobType{Name: "a", Command: "cat"}))
		require.NoError(t, h.CheckType(&config.JobType{Name: "a"}))
		require.ErrorContains(t, h.CheckType(&config.JobType{Name: "a", Command: "nope"}), `"nope" is not in worker.commands`)
		empty := execHandler(nil)
		require.ErrorContains(t, empty.CheckType(&config.JobType{Name: "a"}), "worker.commands is empty")
		missing := execHandler(map[string]*config.Command{"x": {Argv: []string{"no-such-program-here"}}})
		require.Error(t, missing.CheckType(&config.JobType{Name: "a", Command: "x"}))
	})
}

// TestExecHandlerDoesNotLeakWorkerEnv sets a variable of the worker's own environment, so it
// cannot run in parallel.
func TestExecHandlerDoesNotLeakWorkerEnv(t *testing.T) {
	t.Setenv("ORCH_API_TOKEN", "secret")
	h := execHandler(map[string]*config.Command{"env": sh(`printf '"%s|%s"' "$ORCH_API_TOKEN" "$PATH"`)})
	out, err := h.Run(context.Background(), execJob("env", ""))
	require.NoError(t, err)
	var s string
	require.NoError(t, json.Unmarshal(out, &s))
	token, path, _ := strings.Cut(s, "|")
	require.Empty(t, token)
	require.Equal(t, os.Getenv("PATH"), path)
}

func TestExecHandlerKillsProcessGroup(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		// The shell ignores SIGTERM (and so does its child): SIGKILL after the grace ends both.
		"IgnoresSIGTERM": `trap '' TERM; sleep 300 & echo $! > "$PIDFILE"; wait`,
		// The shell dies on SIGTERM; its child ignores it and keeps the output pipe open.
		"OrphanKeepsPipe": `(trap '' TERM; exec sleep 300) & echo $! > "$PIDFILE"; wait`,
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "pid")
			h := execHandler(map[string]*config.Command{"spawn": sh(script, "PIDFILE="+pidFile)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := h.Run(ctx, execJob("spawn", ""))
				done <- err
			}()
			pid := waitPIDFile(t, pidFile)
			require.False(t, processGone(pid), "grandchild should run before the cancel")
			cancel()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.Canceled)
				require.Contains(t, err.Error(), "stopped")
			case <-time.After(10 * time.Second):
				t.Fatal("exec did not return after cancellation")
			}
			require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 5*time.Millisecond,
				"grandchild %d survived", pid)
		})
	}

	t.Run("BackgroundChildOfFinishedCommand", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "pid")
		h := execHandler(map[string]*config.Command{
			"daemon": sh(`sleep 300 >/dev/null 2>&1 & echo $! > "$PIDFILE"; echo '{"ok":1}'`, "PIDFILE="+pidFile),
		})
		out, err := h.Run(context.Background(), execJob("daemon", ""))
		require.NoError(t, err)
		require.JSONEq(t, `{"ok":1}`, string(out))
		pid := waitPIDFile(t, pidFile)
		require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 5*time.Millisecond)
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		h := execHandler(map[string]*config.Command{"hang": sh("sleep 300")})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := h.Run(ctx, execJob("hang", ""))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, IsNonRetryable(err))
	})
}

// waitPIDFile waits for the script to write a pid to path.
func waitPIDFile(t *testing.T, path string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	}, 10*time.Second, 2*time.Millisecond)
	return pid
}

// processGone reports whether pid no longer runs. A zombie counts as gone: it is dead, and
// whether anyone reaps it depends on the container's init.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
