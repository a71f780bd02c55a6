package pools

import (
	"context"
	"errors"
	"time"
)

// ErrBackingOff is returned by Provisioner.Start while a pool's workers keep crashing: the
// next start waits for the backoff to pass.
var ErrBackingOff = errors.New("backing off after worker crashes")

// ErrNotManaged is returned by a provisioner that does not start workers (ExternalProvisioner).
var ErrNotManaged = errors.New("this provisioner does not start workers")

// Provisioner starts and stops the worker processes of pools, for the Reconciler. It lives as
// long as the orchestrator process, across leadership terms: the processes it started outlive a
// lost leadership (and the orchestrator itself), and a later leader adopts them from the
// registry.
type Provisioner interface {
	// Name is "local" or "external" (shown in logs and /status).
	Name() string
	// Managed reports whether the provisioner starts and stops workers. When it does not, the
	// reconciler only reports what it sees (spawned_workers) and relays drain and evict
	// orders through the workers' heartbeats.
	Managed() bool
	// Running returns the processes the provisioner started for the pool that have not exited,
	// registered or not.
	Running(poolID string) []Process
	// Start starts one worker of spec.PoolID (ErrBackingOff while the pool's workers crash).
	Start(ctx context.Context, spec WorkerSpec) (Process, error)
	// Stop asks a worker it started to drain (SIGTERM): stop reading, finish, exit.
	Stop(workerID string) error
	// Kill ends a worker it started at once (SIGKILL).
	Kill(workerID string) error
	// Exited returns the processes that exited since the previous call, and forgets them.
	Exited() []Exit
}

// WorkerSpec is one worker to start.
type WorkerSpec struct {
	PoolID   string
	WorkerID string
	Types    []string
	ModelID  string
	Adapter  string
	Variant  string
}

// Process is a worker process a provisioner started.
type Process struct {
	WorkerID  string
	PoolID    string
	PID       int
	StartedAt time.Time
	// StopRequestedAt is when Stop or Kill was first called (zero: still wanted).
	StopRequestedAt time.Time
}

// Stopping reports whether the process was asked to go.
func (p Process) Stopping() bool { return !p.StopRequestedAt.IsZero() }

// Exit is how a process ended.
type Exit struct {
	Process
	// Code is the exit status, -1 when a signal ended the process (Signal names it).
	Code   int
	Signal string
	// Crashed: the process ended without being asked to and not with status 0.
	Crashed bool
	At      time.Time
}

var (
	_ Provisioner = ExternalProvisioner{}
	_ Provisioner = (*LocalProvisioner)(nil)
)
