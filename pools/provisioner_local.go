package pools

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuorch/orchestrator/internal/startstop"
)

// Defaults of LocalConfig.
const (
	// RestartBackoffMinDefault is the delay before the first replacement of a crashed worker;
	// it doubles with each further crash of the pool's workers.
	RestartBackoffMinDefault = 500 * time.Millisecond
	// RestartBackoffMaxDefault caps that delay.
	RestartBackoffMaxDefault = time.Minute
	// StableAfterDefault is how long a worker must have run for its crash to start the pool's
	// backoff afresh.
	StableAfterDefault = 30 * time.Second
)

// LocalConfig configures a LocalProvisioner.
type LocalConfig struct {
	// Binary is the worker program. Required.
	Binary string
	// Args are its arguments (none by default: the environment configures it).
	Args []string
	// LogDir receives one log file per worker, <worker_id>.log (stdout and stderr). Required.
	LogDir string
	// Env is added to the orchestrator's own environment for every worker (API address and
	// token, Redis, configuration file).
	Env []string
	// RestartBackoffMin and RestartBackoffMax bound the delay before a crashed pool's next
	// start (RestartBackoffMinDefault, RestartBackoffMaxDefault).
	RestartBackoffMin time.Duration
	RestartBackoffMax time.Duration
	// StableAfter resets a pool's backoff when its crashed worker had run this long.
	StableAfter time.Duration
	// OnExit is called after a worker exited (the reconciler's Wake); it must not block.
	OnExit func()
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// LocalProvisioner starts the workers of pools as child processes of the orchestrator, on this
// host, and supervises them: it reaps them, reports their exits (a crash delays the pool's next
// start with capped exponential backoff), and stops them with SIGTERM (drain) or SIGKILL.
//
// The children stay in the orchestrator's process group, without a pipe to it (their output
// goes to files): a Ctrl-C on the terminal drains them with the orchestrator, while an
// orchestrator that dies alone leaves them running, to be adopted by the next leader from the
// registry instead of being started twice.
type LocalProvisioner struct {
	cfg LocalConfig
	log *slog.Logger

	mu      sync.Mutex
	procs   map[string]*localProc // by worker id
	exits   []Exit
	backoff map[string]*poolBackoff // by pool id
}

type localProc struct {
	Process
	cmd *exec.Cmd
}

// poolBackoff is a pool's crash record: consecutive crashes, and when it may start again.
type poolBackoff struct {
	crashes   int
	notBefore time.Time
}

// NewLocal returns a LocalProvisioner; the log directory is created when missing.
func NewLocal(cfg LocalConfig) (*LocalProvisioner, error) {
	cfg.RestartBackoffMin = cmp.Or(cfg.RestartBackoffMin, RestartBackoffMinDefault)
	cfg.RestartBackoffMax = cmp.Or(cfg.RestartBackoffMax, RestartBackoffMaxDefault)
	cfg.StableAfter = cmp.Or(cfg.StableAfter, StableAfterDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Binary == "" || cfg.LogDir == "" {
		return nil, errors.New("new local provisioner: the worker binary and the log directory are required")
	}
	if cfg.RestartBackoffMax < cfg.RestartBackoffMin {
		return nil, fmt.Errorf("new local provisioner: restart backoff max %s is below min %s", cfg.RestartBackoffMax, cfg.RestartBackoffMin)
	}
	if err := os.MkdirAll(cfg.LogDir, 0o750); err != nil {
		return nil, fmt.Errorf("new local provisioner: create log directory: %w", err)
	}
	return &LocalProvisioner{
		cfg:     cfg,
		log:     cmp.Or(cfg.Logger, slog.Default()).With("component", "pools", "provisioner", "local"),
		procs:   map[string]*localProc{},
		backoff: map[string]*poolBackoff{},
	}, nil
}

// Name is "local".
func (l *LocalProvisioner) Name() string { return "local" }

// Managed is true.
func (l *LocalProvisioner) Managed() bool { return true }

// Running returns the pool's live children, by worker id.
func (l *LocalProvisioner) Running(poolID string) []Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Process
	for _, p := range l.procs {
		if p.PoolID == poolID {
			out = append(out, p.Process)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].WorkerID < out[j].WorkerID })
	return out
}

// Start starts one worker: the binary with the orchestrator's environment plus cfg.Env and the
// worker's own (ORCH_POOL_ID, ORCH_WORKER_ID, ORCH_WORKER_TYPES, ORCH_MODEL_*), output appended
// to LogDir/<worker_id>.log.
func (l *LocalProvisioner) Start(_ context.Context, spec WorkerSpec) (Process, error) {
	now := l.cfg.Now()
	l.mu.Lock()
	if b := l.backoff[spec.PoolID]; b != nil && now.Before(b.notBefore) {
		l.mu.Unlock()
		return Process{}, fmt.Errorf("start worker of pool %s: %w until %s", spec.PoolID, ErrBackingOff,
			b.notBefore.Format(time.RFC3339Nano))
	}
	l.mu.Unlock()
	logPath := filepath.Join(l.cfg.LogDir, spec.WorkerID+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return Process{}, fmt.Errorf("start worker %s: open log: %w", spec.WorkerID, err)
	}
	// The child has its own descriptor and writes through it; ours only needs releasing.
	defer func() { _ = f.Close() }()
	cmd := exec.Command(l.cfg.Binary, l.cfg.Args...)
	cmd.Env = append(append(os.Environ(), l.cfg.Env...),
		"ORCH_POOL_ID="+spec.PoolID,
		"ORCH_WORKER_ID="+spec.WorkerID,
		"ORCH_WORKER_TYPES="+strings.Join(spec.Types, ","),
		"ORCH_MODEL_ID="+spec.ModelID,
		"ORCH_MODEL_ADAPTER="+spec.Adapter,
		"ORCH_MODEL_VARIANT="+spec.Variant,
	)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return Process{}, fmt.Errorf("start worker %s: %w", spec.WorkerID, err)
	}
	p := &localProc{Process: Process{WorkerID: spec.WorkerID, PoolID: spec.PoolID, PID: cmd.Process.Pid,
		StartedAt: now}, cmd: cmd}
	l.mu.Lock()
	l.procs[spec.WorkerID] = p
	l.mu.Unlock()
	l.log.Info("worker started", "pool_id", spec.PoolID, "worker_id", spec.WorkerID, "pid", p.PID, "log", logPath)
	go l.wait(p)
	return p.Process, nil
}

// wait reaps one child and records its exit.
func (l *LocalProvisioner) wait(p *localProc) {
	err := p.cmd.Wait()
	now := l.cfg.Now()
	ex := Exit{Process: p.Process, Code: p.cmd.ProcessState.ExitCode(), At: now}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Signal = ws.Signal().String()
	}
	l.mu.Lock()
	ex.StopRequestedAt = p.StopRequestedAt
	ex.Crashed = !ex.Stopping() && ex.Code != 0
	delete(l.procs, p.WorkerID)
	l.exits = append(l.exits, ex)
	var delay time.Duration
	if ex.Crashed {
		b := l.backoff[p.PoolID]
		if b == nil || now.Sub(p.StartedAt) >= l.cfg.StableAfter {
			b = &poolBackoff{}
			l.backoff[p.PoolID] = b
		}
		b.crashes++
		delay = startstop.Jitter(min(l.cfg.RestartBackoffMin<<min(b.crashes-1, 20), l.cfg.RestartBackoffMax), 0.2)
		b.notBefore = now.Add(delay)
	} else if ex.Code == 0 {
		delete(l.backoff, p.PoolID)
	}
	l.mu.Unlock()
	attrs := []any{"pool_id", p.PoolID, "worker_id", p.WorkerID, "pid", p.PID, "exit_code", ex.Code,
		"uptime_seconds", now.Sub(p.StartedAt).Seconds()}
	if ex.Signal != "" {
		attrs = append(attrs, "signal", ex.Signal)
	}
	if ex.Crashed {
		l.log.Warn("worker crashed; restarting after backoff", append(attrs, "error", err, "backoff", delay)...)
	} else {
		l.log.Info("worker exited", attrs...)
	}
	if l.cfg.OnExit != nil {
		l.cfg.OnExit()
	}
}

// Stop sends SIGTERM to a worker it started: the worker drains and exits.
func (l *LocalProvisioner) Stop(workerID string) error { return l.signal(workerID, syscall.SIGTERM) }

// Kill sends SIGKILL to a worker it started.
func (l *LocalProvisioner) Kill(workerID string) error { return l.signal(workerID, syscall.SIGKILL) }

func (l *LocalProvisioner) signal(workerID string, sig syscall.Signal) error {
	l.mu.Lock()
	p := l.procs[workerID]
	if p != nil && p.StopRequestedAt.IsZero() {
		p.StopRequestedAt = l.cfg.Now()
	}
	l.mu.Unlock()
	if p == nil {
		return nil // exited meanwhile
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal worker %s (pid %d) %s: %w", workerID, p.PID, sig, err)
	}
	l.log.Info("worker signalled", "pool_id", p.PoolID, "worker_id", workerID, "pid", p.PID, "signal", sig.String())
	return nil
}

// Exited returns the exits since the previous call.
func (l *LocalProvisioner) Exited() []Exit {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.exits
	l.exits = nil
	return out
}
