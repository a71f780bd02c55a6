package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
)

// LockFileName is the lock file LocalElector keeps in the data directory; it holds the pid
// of the orchestrator using the directory.
const LockFileName = "orchestrator.lock"

// ErrDataDirInUse means another process holds the data directory's lock file.
var ErrDataDirInUse = errors.New("data directory in use")

// LocalElector is the elector of the embedded single-node mode: the instance that holds an
// exclusive flock on the data directory's lock file is the leader, for as long as it runs.
// A second orchestrator on the same directory fails to start with a clear message instead of
// silently running a second set of maintenance loops.
//
// It still acquires a term through the store and fences its writes with it, so leader-only
// code is the same in both modes. It leads from Start to Stop, except when the store reports
// a newer term (another elector on the same database): then it steps down and acquires a new
// term, as a MySQLElector would after losing its lock.
type LocalElector struct {
	startstop.Base
	core
	dir string

	mu   sync.Mutex // serialises Start and Stop
	file *os.File   // the locked lock file while started
}

// NewLocal returns an elector for the data directory dir (created when missing), recording
// terms in st. It fails when cfg is invalid (LockName and WaitTimeout are not used).
func NewLocal(dir string, st store.Store, cfg Config) (*LocalElector, error) {
	if dir == "" || st == nil {
		return nil, errors.New("new local elector: data directory and store are required")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("new local elector: %w", err)
	}
	return &LocalElector{core: newCore(st, cfg), dir: dir}, nil
}

// Start locks the data directory, acquires a term and starts OnElected; when it returns nil
// the instance leads. It fails, wrapping ErrDataDirInUse, when another orchestrator uses the
// directory, and when the term cannot be acquired. Starting a started elector does nothing.
func (e *LocalElector) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.file != nil {
		return nil
	}
	f, err := lockDataDir(e.dir)
	if err != nil {
		return fmt.Errorf("start local elector: %w", err)
	}
	term, err := e.acquire(ctx)
	if err != nil {
		unlockDataDir(f)
		return fmt.Errorf("start local elector: %w", err)
	}
	elected := make(chan struct{})
	started := e.Go(ctx, func(ctx context.Context) {
		defer e.resign()
		e.lead(ctx, term)
		close(elected)
		e.loop(ctx, e.runOnce)
	})
	if !started { // cannot happen: file and the loop are set and cleared together
		unlockDataDir(f)
		return errors.New("start local elector: already running")
	}
	e.file = f
	<-elected
	return nil
}

// Stop resigns (cancels the leader context and waits for OnElected), then unlocks the data
// directory. Idempotent and safe before Start.
func (e *LocalElector) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Base.Stop()
	if e.file != nil {
		unlockDataDir(e.file)
		e.file = nil
	}
}

// runOnce is one step: renew the term (stepping down when a newer one exists), or acquire a
// new term after a step-down. It returns the delay to the next step.
func (e *LocalElector) runOnce(ctx context.Context) (time.Duration, error) {
	if e.leading == nil {
		term, err := e.acquire(ctx)
		if err != nil {
			return 0, err
		}
		e.lead(ctx, term)
		return e.interval(1), nil
	}
	if err := e.touch(ctx, e.leading.term); err != nil {
		e.settle(e.lose(), EventLost, err)
		return e.interval(cooldownIntervals), nil
	}
	return e.interval(1), nil
}

// resign ends the leadership, if any, when the elector stops.
func (e *LocalElector) resign() {
	if e.leading != nil {
		e.settle(e.lose(), EventResigned, nil)
	}
}

// lockDataDir takes the exclusive lock on dir's lock file without waiting and writes this
// process's pid into it. flock (not fcntl) locks belong to the open file, so a second
// LocalElector in the same process is refused too, and the kernel drops the lock when the
// process dies: a crashed orchestrator never leaves a stale lock behind.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another orchestrator is using data directory %s (pid %s): %w",
				dir, readPID(path), ErrDataDirInUse)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := writePID(f); err != nil {
		unlockDataDir(f)
		return nil, fmt.Errorf("write pid to %s: %w", path, err)
	}
	return f, nil
}

// unlockDataDir clears the pid and releases the lock. The file stays: deleting a lock file
// races with a process that has just opened it.
func unlockDataDir(f *os.File) {
	_ = f.Truncate(0)
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	_ = f.Close()
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return err
	}
	return f.Sync()
}

// readPID returns the pid recorded in the lock file, or "unknown" (the holder may not have
// written it yet).
func readPID(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return "unknown"
	}
	return strconv.Itoa(pid)
}
