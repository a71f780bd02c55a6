package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/wire"
)

// API is the part of the orchestrator's API a worker calls. *client.Client implements it; tests
// use an in-memory fake.
type API interface {
	Claim(ctx context.Context, req wire.ClaimRequest) (wire.ClaimResponse, error)
	Start(ctx context.Context, req wire.StartRequest) (wire.StartResponse, error)
	Complete(ctx context.Context, req wire.CompleteRequest) (wire.CompleteResponse, error)
	RenewLeases(ctx context.Context, req wire.RenewRequest) (wire.RenewResponse, error)
}

// Runtime defaults.
const (
	// FlushSizeDefault is how many starts or results one report call carries at most.
	FlushSizeDefault = 100
	// FlushDelayDefault is how long a report waits for company before it is sent.
	FlushDelayDefault = 5 * time.Millisecond
	// FlushTimeoutDefault bounds the last reports at shutdown; what is not reported by then is
	// left to the lease purger and the reclaimer.
	FlushTimeoutDefault = 10 * time.Second
	// RetryMinDefault and RetryMaxDefault bound the backoff between failed API calls.
	RetryMinDefault = 100 * time.Millisecond
	RetryMaxDefault = 10 * time.Second
	// RetryLaterDelayDefault is how long a reader pauses after the API answered retry_later
	// (no resources now), so it does not spin on entries it cannot claim.
	RetryLaterDelayDefault = 500 * time.Millisecond
	// TouchIntervalDefault is how often the entries of running jobs get their idle time reset,
	// well below config.ClaimIdleDefault so the reclaimer leaves them alone.
	TouchIntervalDefault = config.ClaimIdleDefault / 3
	// LeaseTTLDefault is the lease TTL the renew interval is derived from until a claim says
	// otherwise (each claimed job carries its lease's TTL).
	LeaseTTLDefault = config.LeaseTTLDefault
	// TelemetryIntervalDefault is the longest time between two telemetry reports.
	TelemetryIntervalDefault = config.TelemetryPollIntervalDefault
	// renewIntervalMin bounds how often the renewer calls, whatever the TTLs.
	renewIntervalMin = 10 * time.Millisecond
)

// Config configures a Worker. Zero durations and sizes take the defaults above or of config.
type Config struct {
	// WorkerID names the worker in the API and is its consumer name in every group. Required.
	WorkerID string
	// PoolID and NodeID are sent with claims (GPU leases are placed on NodeID's GPUs).
	PoolID string
	NodeID string
	// NodeLabels are the node's configured labels (config node_labels), sent with the
	// registration; validated by config.
	NodeLabels map[string]string
	// Preload, when set, runs once for the pool's model before the worker registers
	// (worker/preload.go); ModelID is that model ("": the pool's latest preload event's).
	Preload Preloader
	ModelID string
	// Types are the job types served (name, stream, handler). Required.
	Types []*config.JobType
	// Concurrency is how many jobs run at once, over all types (config.WorkerConcurrencyDefault).
	Concurrency int
	// Batch is the most entries one read takes (config.WorkerBatchDefault).
	Batch int
	// Block is how long one read waits for entries (config.WorkerBlockDefault). It also bounds
	// how long a reader takes to notice shutdown, as reads are not interrupted (an interrupted
	// XREADGROUP may leave entries delivered to nobody until the reclaimer finds them).
	Block time.Duration
	// API claims and reports. Required.
	API API
	// Streams reads and acks entries. Required.
	Streams *streams.Client
	// Registry maps the types' handler names to handlers. Required.
	Registry *Registry
	// Logger is the base logger (default slog.Default()).
	Logger *slog.Logger
	// Metrics records what the handlers run (nil: nothing is recorded).
	Metrics *Metrics
	// Registrar registers the worker, carries its heartbeats and brings back the
	// orchestrator's drain and stop orders (worker/registry.go). Nil: the worker does not
	// register (tests, dev mode's in-process worker).
	Registrar Registrar
	// HeartbeatInterval is how often the worker heartbeats until its registration says
	// otherwise (HeartbeatIntervalDefault); Hostname is reported (default os.Hostname()).
	HeartbeatInterval time.Duration
	Hostname          string
	// ShutdownGrace is how long in-flight jobs may run on after shutdown began before they are
	// cancelled (config.ShutdownGraceDefault).
	ShutdownGrace time.Duration
	// FlushTimeout bounds the last reports at shutdown (FlushTimeoutDefault).
	FlushTimeout time.Duration
	// FlushSize and FlushDelay shape the report batches (FlushSizeDefault, FlushDelayDefault).
	FlushSize  int
	FlushDelay time.Duration
	// RetryMin and RetryMax bound the backoff of failed API and Redis calls.
	RetryMin time.Duration
	RetryMax time.Duration
	// RetryLaterDelay pauses a reader after a retry_later refusal (RetryLaterDelayDefault).
	RetryLaterDelay time.Duration
	// TouchInterval is the longest time between two resets of the idle time of in-flight jobs'
	// entries (TouchIntervalDefault); the renewer touches them on every renewal. Negative: no cap.
	TouchInterval time.Duration
	// LeaseTTL is the lease TTL assumed until claims say otherwise (LeaseTTLDefault). The
	// renewer renews every lease every TTL/3 (the shortest TTL of the leases held).
	LeaseTTL time.Duration
	// Telemetry reads the node's GPUs; each renewal carries a snapshot, at least every
	// TelemetryInterval. Nil: the worker reports none (the node's GPUs are reported by another
	// process, or it has none). Simulated GPUs follow the node's reservations as the
	// orchestrator reports them.
	Telemetry telemetry.Provider
	// TelemetryInterval is the longest time between two telemetry reports
	// (TelemetryIntervalDefault); it must stay below the orchestrator's telemetry freshness.
	TelemetryInterval time.Duration
	// PreRun asks the orchestrator whether a claimed job of a type with a pre-run hook may
	// start (worker/prerun.go); PreRunTypes are those types as the worker's configuration
	// names them (webhooks.pre_run), besides those the orchestrator's registration answers
	// name. Nil: no job asks.
	PreRun      PreRunner
	PreRunTypes []string
}

func (c *Config) fill() {
	c.Concurrency = cmp.Or(c.Concurrency, config.WorkerConcurrencyDefault)
	c.Batch = cmp.Or(c.Batch, config.WorkerBatchDefault)
	c.Block = cmp.Or(c.Block, config.WorkerBlockDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, config.ShutdownGraceDefault)
	c.FlushTimeout = cmp.Or(c.FlushTimeout, FlushTimeoutDefault)
	c.FlushSize = cmp.Or(c.FlushSize, FlushSizeDefault)
	c.FlushDelay = cmp.Or(c.FlushDelay, FlushDelayDefault)
	c.RetryMin = cmp.Or(c.RetryMin, RetryMinDefault)
	c.RetryMax = cmp.Or(c.RetryMax, RetryMaxDefault)
	c.RetryLaterDelay = cmp.Or(c.RetryLaterDelay, RetryLaterDelayDefault)
	c.TouchInterval = cmp.Or(c.TouchInterval, TouchIntervalDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.TelemetryInterval = cmp.Or(c.TelemetryInterval, TelemetryIntervalDefault)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, HeartbeatIntervalDefault)
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.WorkerID == "" {
		bad("worker id is required")
	}
	if c.API == nil || c.Streams == nil || c.Registry == nil {
		bad("API, Streams and Registry are required")
	}
	if len(c.Types) == 0 {
		bad("at least one job type is required")
	}
	if c.Concurrency < 1 || c.Batch < 1 || c.FlushSize < 1 {
		bad("concurrency, batch and flush size must be positive")
	}
	if c.Block < time.Millisecond {
		bad("block must be at least 1ms (a zero BLOCK would wait forever)")
	}
	if c.LeaseTTL <= 0 || c.TelemetryInterval <= 0 {
		bad("lease ttl and telemetry interval must be positive")
	}
	if c.RetryMax < c.RetryMin {
		bad("retry max %s is below retry min %s", c.RetryMax, c.RetryMin)
	}
	seen := map[string]bool{}
	for _, t := range c.Types {
		if t == nil || t.Name == "" || t.Stream == "" || t.Handler == "" {
			bad("every job type needs a name, a stream and a handler")
			continue
		}
		if seen[t.Name] {
			bad("job type %s is listed twice", t.Name)
		}
		seen[t.Name] = true
		if c.Registry != nil {
			if err := c.Registry.CheckType(t); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("configure worker: %w", err)
	}
	return nil
}
