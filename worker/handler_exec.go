package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gpuorch/orchestrator/config"
)

// Exec defaults.
const (
	// ExecKillGraceDefault is how long a cancelled command has between SIGTERM and SIGKILL.
	ExecKillGraceDefault = 5 * time.Second
	// ExecIOGraceDefault bounds the wait for stdout/stderr to close after the command exited: a
	// grandchild that keeps the pipes open must not hold the job (it is killed right after).
	ExecIOGraceDefault = time.Second
	// ExecStderrTailBytes is how much of the end of stderr a failure's error message carries.
	ExecStderrTailBytes = 4 << 10
)

// ExecInheritEnvDefault are the variables of the worker's own environment a command inherits.
// Everything else (ORCH_API_TOKEN above all) stays out of reach of the job's process.
var ExecInheritEnvDefault = []string{"PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "LD_LIBRARY_PATH"}

// ExecConfig configures NewExecHandler.
type ExecConfig struct {
	// Commands are the programs the handler may run, by name (config.Worker.Commands).
	Commands map[string]*config.Command
	// JobTypes give each type's fixed command (config.JobType.Command).
	JobTypes map[string]*config.JobType
	// KillGrace is the time between SIGTERM and SIGKILL on cancellation (ExecKillGraceDefault).
	KillGrace time.Duration
	// IOGrace bounds the wait for the output pipes after the process exited (ExecIOGraceDefault).
	IOGrace time.Duration
	// InheritEnv lists the worker's variables passed on (nil: ExecInheritEnvDefault).
	InheritEnv []string
	// Logger receives warnings such as truncated output.
	Logger *slog.Logger
}

// ExecHandler runs a command named in the worker's configuration, never a shell and never a
// program named by the job: the type's fixed command, or else the payload's "command" field,
// must be a key of Commands. The payload goes to stdin; stdout (capped) is the result.
type ExecHandler struct {
	cfg ExecConfig
	log *slog.Logger
}

// NewExecHandler returns an ExecHandler with defaults filled in.
func NewExecHandler(cfg ExecConfig) *ExecHandler {
	cfg.KillGrace = cmp.Or(cfg.KillGrace, ExecKillGraceDefault)
	cfg.IOGrace = cmp.Or(cfg.IOGrace, ExecIOGraceDefault)
	if cfg.InheritEnv == nil {
		cfg.InheritEnv = ExecInheritEnvDefault
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	return &ExecHandler{cfg: cfg, log: log.With("component", "worker", "handler", "exec")}
}

// CheckType fails when the type's fixed command is not configured (or its program is missing),
// or when the type leaves the choice to the payload but no command is configured at all.
func (h *ExecHandler) CheckType(t *config.JobType) error {
	if t.Command == "" {
		if len(h.cfg.Commands) == 0 {
			return errors.New("exec handler: the type's payload names the command, but worker.commands is empty")
		}
		return nil
	}
	c, ok := h.cfg.Commands[t.Command]
	if !ok || c == nil || len(c.Argv) == 0 {
		return fmt.Errorf("exec handler: command %q is not in worker.commands", t.Command)
	}
	if p := c.Argv[0]; filepath.IsAbs(p) || !strings.Contains(p, "/") {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("exec handler: command %q: %w", t.Command, err)
		}
	}
	return nil
}

// Run runs the job's command in its own process group, feeding the payload to stdin. A non-zero
// exit fails the attempt with the end of stderr in the error; when ctx ends the group gets
// SIGTERM, then SIGKILL after KillGrace, and no process of the group outlives Run.
func (h *ExecHandler) Run(ctx context.Context, job Job) (json.RawMessage, error) {
	name, err := h.commandName(job)
	if err != nil {
		return nil, NonRetryable(err)
	}
	c := h.cfg.Commands[name]
	if c == nil || len(c.Argv) == 0 {
		return nil, NonRetryable(fmt.Errorf("exec: command %q is not in worker.commands", name))
	}
	maxOut := cmp.Or(c.MaxOutputBytes, config.ExecMaxOutputBytesDefault)
	stdout := &capWriter{max: maxOut}
	stderr := &tailWriter{max: ExecStderrTailBytes}
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...) //nolint:gosec // argv comes from the operator's config only
	cmd.Dir = c.Dir
	cmd.Env = h.env(c, job)
	cmd.Stdin = bytes.NewReader(job.Payload)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = h.cfg.IOGrace
	if err := cmd.Start(); err != nil {
		// The job's error goes to its agent: it names the command, never the worker's program
		// path or the system's answer about it, which go to the worker's own log.
		h.log.Error("exec command did not start", "job_id", job.ID, "command", name, "program", c.Argv[0], "error", err)
		return nil, fmt.Errorf("exec %s: the command could not be started on this worker (its log says why)", name)
	}
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go h.killOnDone(ctx, pgid, exited)
	waitErr := cmd.Wait()
	close(exited)
	// Sweep the group: a grandchild that outlived its parent must not outlive the job.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)

	result := outputJSON(stdout.Bytes())
	if stdout.truncated {
		h.log.Warn("exec output truncated", "job_id", job.ID, "command", name, "max_output_bytes", maxOut,
			"output_bytes", stdout.total)
	}
	if ctx.Err() != nil {
		return result, fmt.Errorf("exec %s: stopped (%w)%s", name, context.Cause(ctx), stderr.suffix())
	}
	if waitErr != nil && !errors.Is(waitErr, exec.ErrWaitDelay) {
		msg := fmt.Sprintf("exec %s: %v", name, waitErr)
		if stdout.truncated {
			msg += fmt.Sprintf(" (stdout truncated at %d bytes)", maxOut)
		}
		return result, fmt.Errorf("%s%s", msg, stderr.suffix())
	}
	return result, nil
}

// killOnDone sends SIGTERM to the process group when ctx ends, and SIGKILL after the grace.
func (h *ExecHandler) killOnDone(ctx context.Context, pgid int, exited <-chan struct{}) {
	select {
	case <-exited:
		return
	case <-ctx.Done():
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(h.cfg.KillGrace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// commandName picks the type's fixed command, else the payload's "command" field.
func (h *ExecHandler) commandName(job Job) (string, error) {
	if t := h.cfg.JobTypes[job.Type]; t != nil && t.Command != "" {
		return t.Command, nil
	}
	var p struct {
		Command *string `json:"command"`
	}
	if err := json.Unmarshal(job.Payload, &p); err != nil {
		return "", fmt.Errorf(`exec: payload field "command": want an object naming a configured command: %w`, err)
	}
	if p.Command == nil || *p.Command == "" {
		return "", errors.New(`exec: payload field "command" is required (the type names no command)`)
	}
	if _, ok := h.cfg.Commands[*p.Command]; !ok {
		// The error reaches the job's agent: it names the requested command only. The commands
		// this worker has are the operator's business, and go to the worker's log.
		requested := clipName(*p.Command)
		h.log.Warn("exec job names a command this worker does not have", "job_id", job.ID,
			"command", requested, "configured", h.commandNames())
		return "", fmt.Errorf(`exec: payload field "command": %q is not configured on this worker`, requested)
	}
	return *p.Command, nil
}

// maxEchoedName bounds the requested command name echoed in a job's error and the log.
const maxEchoedName = 128

// clipName cuts a name from a payload to maxEchoedName bytes (on a rune boundary).
func clipName(s string) string {
	if len(s) <= maxEchoedName {
		return s
	}
	cut := maxEchoedName
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func (h *ExecHandler) commandNames() []string {
	names := make([]string, 0, len(h.cfg.Commands))
	for n := range h.cfg.Commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// env is the inherited allow-list, then the command's Env, then the job's variables (which win).
func (h *ExecHandler) env(c *config.Command, job Job) []string {
	var env []string
	for _, k := range h.cfg.InheritEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, c.Env...)
	vars := JobEnv(job)
	for k, v := range job.Env {
		vars[k] = v
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k]) // later entries win in os/exec
	}
	return env
}

// outputJSON keeps valid JSON as is and encodes anything else as a JSON string; empty is nil.
func outputJSON(b []byte) json.RawMessage {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return nil
	}
	if json.Valid(trimmed) {
		return json.RawMessage(bytes.Clone(trimmed))
	}
	s, _ := json.Marshal(string(b)) // invalid UTF-8 becomes U+FFFD
	return s
}

// capWriter keeps the first max bytes written and counts the rest, so the process never blocks
// on a full pipe.
type capWriter struct {
	max       int
	buf       []byte
	total     int64
	truncated bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.total += int64(len(p))
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	if len(w.buf) < int(w.total) {
		w.truncated = true
	}
	return len(p), nil
}

func (w *capWriter) Bytes() []byte { return w.buf }

// tailWriter keeps the last max bytes written.
type tailWriter struct {
	max  int
	buf  []byte
	lost bool
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
		w.lost = true
	}
	return len(p), nil
}

// suffix formats the stderr tail for an error message ("" when stderr was empty).
func (w *tailWriter) suffix() string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(w.buf), "�"))
	if s == "" {
		return ""
	}
	if w.lost {
		s = "…" + s
	}
	return ": stderr: " + s
}
