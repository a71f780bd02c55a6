package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// process is a child process of the bench (orchestrator, worker, perf) in its own process
// group, with its output in a log file. The group lets the bench signal the child and anything
// it started, and keeps the terminal's Ctrl-C away from the children: the bench decides how
// they stop.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // the exit status, set before done is closed
}

// registry tracks every live child so that a second Ctrl-C or a fatal path can kill them all.
var registry = struct {
	sync.Mutex
	procs map[*process]struct{}
}{procs: map[*process]struct{}{}}

// startProcess starts bin with args and env (added to the bench's environment) in a new
// process group, writing its output to dir/name.log.
func startProcess(dir, name, bin string, env []string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Pdeathsig kills the child if the bench dies without cleaning up (kill -9 of the bench).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	registry.Lock()
	registry.procs[p] = struct{}{}
	registry.Unlock()
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		registry.Lock()
		delete(registry.procs, p)
		registry.Unlock()
		close(p.done)
	}()
	return p, nil
}

// pid returns the child's process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group.
func (p *process) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.pid(), sig)
}

// stop asks the process group to exit with SIGTERM and waits up to grace, then kills it. It
// returns the exit error of a process that did not exit cleanly in time.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("stop %s: no exit within %s of SIGTERM; killed", p.name, grace)
}

// logContains reports whether the process's log holds s.
func (p *process) logContains(s string) bool {
	b, _ := os.ReadFile(p.log)
	return bytes.Contains(b, []byte(s))
}

// logTail returns the last n bytes of the process's log, for error messages.
func (p *process) logTail(n int) string {
	b, _ := os.ReadFile(p.log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// waitLog waits until the log holds s, the process exits, or ctx ends.
func (p *process) waitLog(ctx context.Context, s string) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if p.logContains(s) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%s) before logging %q; log tail:\n%s", p.name, exitText(p.err), s, p.logTail(2048))
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to log %q: %w", p.name, s, ctx.Err())
		case <-t.C:
		}
	}
}

// killAll sends SIGKILL to every live child's process group. It is the last resort of a second
// Ctrl-C; the normal path stops the children one by one.
func killAll() {
	registry.Lock()
	procs := make([]*process, 0, len(registry.procs))
	for p := range registry.procs {
		procs = append(procs, p)
	}
	registry.Unlock()
	for _, p := range procs {
		p.signal(syscall.SIGKILL)
	}
}

// binaries returns the orchestrator and worker binaries of binDir, building both into
// dir/bin when either is missing.
func binaries(ctx context.Context, binDir, dir string) (orch, worker string, err error) {
	orch, err1 := findBinary(binDir, "orchestrator")
	worker, err2 := findBinary(binDir, "worker")
	if err1 == nil && err2 == nil {
		return orch, worker, nil
	}
	out := filepath.Join(dir, "bin")
	progress("stack: %s has no binaries; building them into %s", binDir, out)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out+"/", "./cmd/orchestrator", "./cmd/worker")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("build binaries (run from the module root, or use -bin): %w", err)
	}
	return filepath.Join(out, "orchestrator"), filepath.Join(out, "worker"), nil
}

// findBinary returns the absolute path of dir/name when it is an executable file.
func findBinary(dir, name string) (string, error) {
	p, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("find %s: %w", name, err)
	}
	st, err := os.Stat(p)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("find %s: %s is not an executable (run `make build` or set -bin)", name, p)
	}
	return p, nil
}

// profiler records a CPU profile of one process with `perf record` while a scenario runs. The
// orchestrator has no pprof endpoint, so perf (sampling the Go binary's symbols) is the way to
// see where its CPU goes without changing it.
type profiler struct {
	perf   *process
	data   string
	report string
}

// startProfile starts perf on pid, writing dataDir/<name>.perf.data; finish writes the report to
// reportDir/<name>.perf.txt. It fails when perf is missing.
func startProfile(dataDir, reportDir, name string, pid int) (*profiler, error) {
	perfBin, err := exec.LookPath("perf")
	if err != nil {
		return nil, fmt.Errorf("profile: perf is not installed: %w", err)
	}
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	data := filepath.Join(dataDir, name+".perf.data")
	p, err := startProcess(dataDir, name+".perf", perfBin, nil,
		"record", "-F", "499", "-g", "-o", data, "-p", fmt.Sprint(pid))
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return &profiler{perf: p, data: data, report: filepath.Join(reportDir, name+".perf.txt")}, nil
}

// exitText says how a process ended, for messages: its exit error, or "exit status 0". It is
// text on purpose: a process's exit is context for the reader, not a cause to match.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// finish stops perf (SIGINT makes it write its data) and writes a text report of the hottest
// symbols next to the data. It returns the report's path.
func (pr *profiler) finish(ctx context.Context) (_ string, err error) {
	pr.perf.signal(syscall.SIGINT)
	select {
	case <-pr.perf.done:
	case <-time.After(30 * time.Second):
		pr.perf.signal(syscall.SIGKILL)
		<-pr.perf.done
		return "", errors.New("profile: perf did not stop within 30s")
	}
	out, err := os.Create(pr.report)
	if err != nil {
		return "", fmt.Errorf("profile: %w", err)
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("profile: write report: %w", cerr)
		}
	}()
	// Self time first (where the CPU is burnt), then inclusive time (which code paths cost).
	views := []struct{ title, children, fields, limit string }{
		{"self time by symbol", "--no-children", "overhead,sym", "0.5"},
		{"inclusive time by symbol (children included)", "--children", "overhead_children,overhead,sym", "3"},
	}
	for _, v := range views {
		fmt.Fprintf(out, "######## %s\n", v.title)
		cmd := exec.CommandContext(ctx, "perf", "report", "-i", pr.data, "--stdio", v.children,
			"--fields", v.fields, "--percent-limit", v.limit, "-g", "none")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("profile: perf report: %w", err)
		}
	}
	return pr.report, nil
}
