package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/nodelabels"
)

// Validate fails fast on a configuration that cannot work, naming the key.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.validateProcess()...)
	errs = append(errs, c.validateJobTypes()...)
	errs = append(errs, c.validateWorker()...)
	errs = append(errs, c.validateLeases()...)
	errs = append(errs, c.Scheduler.validate()...)
	errs = append(errs, c.Schedules.validate()...)
	errs = append(errs, c.validateAdmission()...)
	errs = append(errs, c.validatePools()...)
	errs = append(errs, c.Flows.validate()...)
	errs = append(errs, c.validateApprovals()...)
	errs = append(errs, c.Security.validate()...)
	errs = append(errs, c.validateWebhooks()...)
	if err := c.TLS.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateProcess checks the settings of the process as a whole: body and batch sizes, the
// loops' intervals and retentions, logging.
func (c *Config) validateProcess() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if c.MaxPayloadBytes <= 0 {
		bad("max_payload_bytes must be positive")
	}
	if c.SubmitBatchConcurrency < 1 || c.SubmitBatchConcurrency > 1024 {
		bad("submit_batch_concurrency must be in 1..1024, not %d", c.SubmitBatchConcurrency)
	}
	if c.DispatchBatch <= 0 || c.DispatchBatch > 10000 {
		bad("dispatch_batch must be in 1..10000")
	}
	if c.ReclaimBatch < 1 || c.ReclaimBatch > 10000 {
		bad("reclaim_batch must be in 1..10000")
	}
	if c.RetentionBatch < 1 || c.RetentionBatch > 5000 {
		bad("retention_batch must be in 1..5000")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"claim_idle", c.ClaimIdle}, {"reclaim_interval", c.ReclaimInterval},
		{"trim_interval", c.TrimInterval}, {"retention_interval", c.RetentionInterval},
		{"dead_letter_retention", c.DeadLetterRetention}, {"audit_retention", c.AuditRetention},
	} {
		if d.v <= 0 {
			bad("%s must be positive", d.key)
		}
	}
	switch c.LogFormat {
	case "json", "text":
	default:
		bad("log_format %q: want json or text", c.LogFormat)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	return errs
}

// validateJobTypes checks each job type and that no two share a stream.
func (c *Config) validateJobTypes() []error {
	var errs []error
	streams := map[string]string{}
	for _, name := range c.TypeNames() {
		t := c.JobTypes[name]
		if other, dup := streams[t.Stream]; dup {
			errs = append(errs, fmt.Errorf("config: job_types.%s.stream %q is also the stream of %s", name, t.Stream, other))
		}
		streams[t.Stream] = name
		errs = append(errs, t.validate(name)...)
	}
	return errs
}

// validate checks job type name on its own.
func (t *JobType) validate(name string) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if !nameRE.MatchString(name) {
		bad("job_types.%s: a type name is lower case letters, digits and _ (at most 63)", name)
	}
	if !nameRE.MatchString(t.Stream) {
		bad("job_types.%s.stream %q: lower case letters, digits and _", name, t.Stream)
	}
	if t.Stream == "dlq" || t.Stream == "control" {
		bad("job_types.%s.stream %q is reserved", name, t.Stream)
	}
	if !slices.Contains(Handlers, t.Handler) {
		bad("job_types.%s.handler %q: want one of %s", name, t.Handler, strings.Join(Handlers, ", "))
	}
	if t.Command != "" && t.Handler != "exec" {
		bad("job_types.%s.command is only for the exec handler", name)
	}
	if t.MaxAttempts < 1 || t.MaxAttempts > 100 {
		bad("job_types.%s.max_attempts must be in 1..100", name)
	}
	if t.Timeout <= 0 {
		bad("job_types.%s.timeout must be positive", name)
	}
	if t.Retention <= 0 {
		bad("job_types.%s.retention must be positive", name)
	}
	if t.GPUMemoryMB < 0 {
		bad("job_types.%s.gpu_memory_mb must not be negative", name)
	}
	if t.Priority < 0 || t.Priority > 9 {
		bad("job_types.%s.priority must be in 0..9", name)
	}
	b := t.Backoff
	if b.Initial <= 0 || b.Max < b.Initial || b.Multiplier < 1 || b.Jitter < 0 || b.Jitter > 1 {
		bad("job_types.%s.backoff: want 0 < initial <= max, multiplier >= 1, 0 <= jitter <= 1", name)
	}
	return errs
}

// validateWorker checks the worker section: its commands, sizes and the types it serves.
func (c *Config) validateWorker() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	for name, cmd := range c.Worker.Commands {
		if cmd == nil || len(cmd.Argv) == 0 || cmd.Argv[0] == "" {
			bad("worker.commands.%s.argv must name a program", name)
		}
	}
	if p := c.Worker.Preload; p != "" && c.Worker.Commands[p] == nil {
		bad("worker.preload: %q is not in worker.commands (the preload runs a configured command, never a shell)", p)
	}
	if c.Worker.Concurrency < 1 || c.Worker.Concurrency > 10000 {
		bad("worker.concurrency must be in 1..10000")
	}
	if c.Worker.Batch < 1 || c.Worker.Batch > 1000 {
		bad("worker.batch must be in 1..1000")
	}
	for _, t := range c.Worker.Types {
		if _, ok := c.JobTypes[t]; !ok {
			bad("worker.types: unknown job type %q", t)
		}
	}
	if err := nodelabels.Validate("node_labels", c.NodeLabels); err != nil {
		bad("%s", err)
	}
	return errs
}

// validateLeases checks the leases section and the telemetry poll it depends on.
func (c *Config) validateLeases() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if c.Leases.TTL < 100*time.Millisecond || c.Leases.TTL > 24*time.Hour {
		bad("leases.ttl %s: want 100ms..24h", c.Leases.TTL)
	}
	if c.Leases.SafetyMarginMB < 0 {
		bad("leases.safety_margin_mb must not be negative")
	}
	if c.Leases.TelemetryFreshness <= 0 {
		bad("leases.telemetry_freshness must be positive")
	}
	if c.Leases.PurgeInterval <= 0 {
		bad("leases.purge_interval must be positive")
	}
	if c.Telemetry.PollInterval <= 0 {
		bad("telemetry.poll_interval must be positive")
	}
	if c.Telemetry.PollInterval >= c.Leases.TelemetryFreshness {
		bad("telemetry.poll_interval %s must be below leases.telemetry_freshness %s, or every node's telemetry goes stale between two reports",
			c.Telemetry.PollInterval, c.Leases.TelemetryFreshness)
	}
	return errs
}
