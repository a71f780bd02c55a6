// Package worker is the worker runtime: it reads the consumer groups of the job types it serves,
// claims the entries over the API, runs the handlers with bounded concurrency, reports starts and
// results in batches, acknowledges the entries, and drains on shutdown. Handlers are registered
// by name; the built-in ones are noop, sleep, exec (commands from the worker's config, argv
// only) and http.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/wire"
)

// Job is one claimed attempt as a handler sees it.
type Job struct {
	ID      string
	Type    string
	Payload json.RawMessage
	// Attempt is the 1-based number of this attempt.
	Attempt int
	// Timeout is the run-time limit of the attempt; the handler's context carries it already.
	Timeout time.Duration
	// LeaseToken is the lease the job runs under (empty when the API granted none).
	LeaseToken string
	// GPUIndex is the (first) GPU of the lease on this node; nil for a CPU job.
	GPUIndex *int
	// GPUIndexes are all the GPUs of the lease, GPUIndex first (several for a job that asked
	// for more than one).
	GPUIndexes []int
	// Parents are how the job's parents ended, with their results (a job with depends_on or a
	// workflow step with needs; nil otherwise), as the claim carried them.
	Parents []wire.Parent
	// Env is what a handler that starts a process must add to its environment: ORCH_JOB_ID,
	// ORCH_JOB_ATTEMPT, with a lease ORCH_LEASE_TOKEN and CUDA_VISIBLE_DEVICES, and with
	// parents ORCH_PARENTS.
	Env map[string]string
}

// JobEnv returns the environment a job's process gets from the runtime. CUDA_VISIBLE_DEVICES is
// set to the leased GPUs, comma-separated ("0,3"; with CUDA_DEVICE_ORDER=PCI_BUS_ID, the order
// of the lease's NVML indexes),
// and to "" (no GPU visible) for a job leased as a CPU job, so a process can never use a GPU it
// holds no lease on. A job with parents gets them as ORCH_PARENTS, the claim's JSON array of
// {job_id, step, status, result, truncated} (its size bounded by the orchestrator's
// flows.parent_results_max_bytes, under what one variable may hold).
func JobEnv(j Job) map[string]string {
	env := map[string]string{
		"ORCH_JOB_ID":      j.ID,
		"ORCH_JOB_ATTEMPT": strconv.Itoa(j.Attempt),
	}
	if j.LeaseToken != "" {
		env["ORCH_LEASE_TOKEN"] = j.LeaseToken
		env["CUDA_VISIBLE_DEVICES"] = ""
	}
	if len(j.Parents) > 0 {
		// Without HTML escaping, which would write each <, > and & of a result as six bytes
		// and could take the variable past what the claim's budget allowed.
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(j.Parents) // strings and raw JSON from the claim: it cannot fail
		env["ORCH_PARENTS"] = strings.TrimSuffix(b.String(), "\n")
	}
	if gpus := leasedGPUs(j); len(gpus) > 0 {
		env["CUDA_VISIBLE_DEVICES"] = strings.Join(gpus, ",")
		// Lease indexes are NVML's, which follow the PCI bus; CUDA's default order is
		// fastest first, which may number the same GPUs differently.
		env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
	}
	return env
}

// leasedGPUs are the NVML indexes of j's lease, as text.
func leasedGPUs(j Job) []string {
	indexes := j.GPUIndexes
	if len(indexes) == 0 && j.GPUIndex != nil {
		indexes = []int{*j.GPUIndex} // an orchestrator that names one GPU only
	}
	out := make([]string, len(indexes))
	for i, g := range indexes {
		out[i] = strconv.Itoa(g)
	}
	return out
}

// Handler runs one job. It must return when ctx ends (timeout, cancellation by an operator, or
// worker shutdown). The result is any JSON value (nil is fine). A returned error fails the
// attempt; wrap it with NonRetryable when another attempt cannot succeed.
type Handler interface {
	Run(ctx context.Context, job Job) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job Job) (json.RawMessage, error)

// Run calls f.
func (f HandlerFunc) Run(ctx context.Context, job Job) (json.RawMessage, error) { return f(ctx, job) }

// TypeChecker is implemented by handlers that need per-type settings (a command, a URL): the
// worker calls it at start for every type it serves so a type it cannot run fails fast.
type TypeChecker interface {
	CheckType(t *config.JobType) error
}

type nonRetryableError struct{ err error }

func (e *nonRetryableError) Error() string { return e.err.Error() }
func (e *nonRetryableError) Unwrap() error { return e.err }

// NonRetryable marks err so the attempt's failure sends the job to the dead letters at once
// (bad payload, unknown command): retrying would fail the same way. NonRetryable(nil) is nil.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryableError{err: err}
}

// IsNonRetryable reports whether err is or wraps an error marked by NonRetryable.
func IsNonRetryable(err error) bool {
	var nr *nonRetryableError
	return errors.As(err, &nr)
}

// Registry maps handler names (a job type's handler setting) to handlers. It is safe for
// concurrent use.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]Handler
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{handlers: map[string]Handler{}} }

// Register adds h under name. It panics on an empty name, a nil handler or a duplicate name:
// all three are wiring bugs that must not reach production.
func (r *Registry) Register(name string, h Handler) {
	if name == "" || h == nil {
		panic("worker: Register needs a name and a handler")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[name]; dup {
		panic("worker: handler " + name + " registered twice")
	}
	r.handlers[name] = h
}

// Lookup returns the handler registered under name.
func (r *Registry) Lookup(name string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[name]
	return h, ok
}

// Names returns the registered handler names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.handlers))
}

// CheckType says whether this worker can run jobs of type t: its handler is registered and, when
// the handler is a TypeChecker, accepts the type's settings.
func (r *Registry) CheckType(t *config.JobType) error {
	h, ok := r.Lookup(t.Handler)
	if !ok {
		return fmt.Errorf("job type %s: handler %q is not registered in this worker", t.Name, t.Handler)
	}
	if c, ok := h.(TypeChecker); ok {
		if err := c.CheckType(t); err != nil {
			return fmt.Errorf("job type %s: %w", t.Name, err)
		}
	}
	return nil
}

// BuiltinOptions configure NewBuiltinRegistry.
type BuiltinOptions struct {
	// JobTypes are the configured types (config.Config.JobTypes): exec reads a type's command,
	// http its URL.
	JobTypes map[string]*config.JobType
	// Commands are the programs exec may run (config.Worker.Commands).
	Commands map[string]*config.Command
	// KillGrace is how long exec waits after SIGTERM before SIGKILL (ExecKillGraceDefault).
	KillGrace time.Duration
	// HTTPClient sends the http handler's requests (default: a client with transport timeouts).
	HTTPClient *http.Client
	// Logger receives the handlers' warnings (truncated output).
	Logger *slog.Logger
}

// NewBuiltinRegistry returns a Registry with noop, sleep, exec and http.
func NewBuiltinRegistry(o BuiltinOptions) *Registry {
	r := NewRegistry()
	r.Register("noop", NoopHandler{})
	r.Register("sleep", SleepHandler{})
	r.Register("exec", NewExecHandler(ExecConfig{
		Commands: o.Commands, JobTypes: o.JobTypes, KillGrace: o.KillGrace, Logger: o.Logger,
	}))
	r.Register("http", NewHTTPHandler(HTTPConfig{JobTypes: o.JobTypes, Client: o.HTTPClient, Logger: o.Logger}))
	return r
}
