// Package config loads the orchestrator's and the worker's configuration: a YAML file (ORCH_CONFIG)
// with ORCH_* environment overrides on top, and defaults for everything else. Every setting has a
// YAML key, a default constant and a line in docs/configuration.md.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpuorch/orchestrator/nodelabels"
)

// Defaults.
const (
	HTTPAddrDefault           = "127.0.0.1:8080"
	MySQLDSNDefault           = "root@tcp(127.0.0.1:3306)/orchestrator?parseTime=true"
	RedisAddrDefault          = "127.0.0.1:6379"
	MaxPayloadBytesDefault    = 1 << 20
	MaxAttemptsDefault        = 3
	JobTimeoutDefault         = 30 * time.Minute
	ClaimIdleDefault          = 60 * time.Second
	DispatchIntervalDefault   = time.Second
	DispatchBatchDefault      = 500
	ShutdownGraceDefault      = 30 * time.Second
	BackoffInitialDefault     = time.Second
	BackoffMultiplierDefault  = 2.0
	BackoffMaxDefault         = 5 * time.Minute
	BackoffJitterDefault      = 0.2
	LogLevelDefault           = "info"
	LogFormatDefault          = "json"
	WorkerConcurrencyDefault  = 10
	WorkerBatchDefault        = 50
	WorkerBlockDefault        = 2 * time.Second
	ExecMaxOutputBytesDefault = 1 << 20
	HTTPHandlerTimeoutDefault = 5 * time.Minute
	// SubmitBatchConcurrencyDefault: two batches keep the engine's two submit committers busy
	// (one decodes while the other commits); more only queue there, holding their memory.
	SubmitBatchConcurrencyDefault = 2
	// LeaseTTLDefault is how long a lease lives without a heartbeat; workers renew every third.
	LeaseTTLDefault = 30 * time.Second
	// LeaseSafetyMarginMBDefault is the GPU memory never handed out, for the CUDA context,
	// fragmentation and telemetry lag.
	LeaseSafetyMarginMBDefault = 512
	// LeaseTelemetryFreshnessDefault is how old a GPU's telemetry may be for placement to use it.
	LeaseTelemetryFreshnessDefault = 30 * time.Second
	// LeasePurgeIntervalDefault is how often expired leases are looked for.
	LeasePurgeIntervalDefault = 5 * time.Second
	// TelemetryPollIntervalDefault is how often a process reads its node's GPUs.
	TelemetryPollIntervalDefault = 5 * time.Second
	// WorkerMetricsAddrDefault is where a worker serves GET /metrics: loopback, so nothing is
	// exposed unless asked ("0" disables the endpoint).
	WorkerMetricsAddrDefault = "127.0.0.1:9091"
)

// Defaults of the embedded single-node mode (`orchestrator dev`).
const (
	// DataDirDefault is where the embedded mode keeps its SQLite database and lock file,
	// relative to the working directory.
	DataDirDefault = "data"
	// EmbeddedRedisAddrDefault is where the embedded mode's in-process Redis listens: a fixed
	// loopback port, so that local worker processes find it; not Redis's own 6379, so that it
	// never clashes with a real Redis on the host.
	EmbeddedRedisAddrDefault = "127.0.0.1:6390"
)

// Defaults of the leader's maintenance: reclaiming, trimming, retention.
const (
	ReclaimIntervalDefault     = 15 * time.Second
	ReclaimBatchDefault        = 100
	TrimIntervalDefault        = time.Minute
	RetentionDefault           = 7 * 24 * time.Hour
	DeadLetterRetentionDefault = 30 * 24 * time.Hour
	AuditRetentionDefault      = 30 * 24 * time.Hour
	RetentionIntervalDefault   = time.Minute
	RetentionBatchDefault      = 500
)

// Config is the whole configuration. Zero values are filled from the defaults by Load.
type Config struct {
	// HTTPAddr is where the API listens (ORCH_HTTP_ADDR).
	HTTPAddr string `yaml:"http_addr"`
	// MySQLDSN is the MariaDB DSN in go-sql-driver form (ORCH_MYSQL_DSN).
	MySQLDSN string `yaml:"mysql_dsn"`
	// RedisAddr is host:port of Redis (ORCH_REDIS_ADDR).
	RedisAddr string `yaml:"redis_addr"`
	// RedisPassword authenticates to Redis (ORCH_REDIS_PASSWORD).
	RedisPassword string `yaml:"redis_password"`
	// RedisPrefix is put before every Redis key (ORCH_REDIS_PREFIX), so several clusters (or
	// test runs) can share one Redis.
	RedisPrefix string `yaml:"redis_prefix"`
	// DataDir is the embedded mode's data directory (ORCH_DATA_DIR): the SQLite database and
	// the lock file that keeps a second orchestrator off it. Not used by serve.
	DataDir string `yaml:"data_dir"`
	// EmbeddedRedisAddr is the loopback host:port of the embedded mode's in-process Redis
	// (ORCH_EMBEDDED_REDIS_ADDR). Not used by serve, which uses RedisAddr.
	EmbeddedRedisAddr string `yaml:"embedded_redis_addr"`
	// NodeID names this host (ORCH_NODE_ID; default: the hostname).
	NodeID string `yaml:"node_id"`
	// NodeLabels are this node's labels, which its workers send with their registration to
	// the node registry (ORCH_NODE_LABELS=zone=a,tier=prod replaces the file's): keys and
	// values of A-Z a-z 0-9 . _ : - (keys up to 63, values up to 128), at most 32, no key
	// starting with "gpu." (the orchestrator sets those from telemetry).
	NodeLabels map[string]string `yaml:"node_labels"`
	// TokensFile holds the API tokens as SHA-256 hashes with their roles (ORCH_TOKENS_FILE).
	TokensFile string `yaml:"tokens_file"`
	// MaxPayloadBytes caps a job payload (ORCH_MAX_PAYLOAD_BYTES).
	MaxPayloadBytes int64 `yaml:"max_payload_bytes"`
	// SubmitBatchConcurrency is how many POST /jobs/submit_batch requests an orchestrator
	// reads and works on at once (ORCH_SUBMIT_BATCH_CONCURRENCY); the others wait for a turn
	// before their body is read. A batch holds up to 32 MiB of body and several times that
	// once decoded, so this bounds the memory of bulk ingest.
	SubmitBatchConcurrency int `yaml:"submit_batch_concurrency"`
	// ClaimIdle is how long a stream entry may stay unacknowledged before the reclaimer looks at
	// it (ORCH_CLAIM_IDLE_MS).
	ClaimIdle time.Duration `yaml:"claim_idle"`
	// DispatchInterval is how often the dispatcher looks for unpublished due jobs.
	DispatchInterval time.Duration `yaml:"dispatch_interval"`
	// DispatchBatch is how many jobs the dispatcher publishes per pass at most.
	DispatchBatch int `yaml:"dispatch_batch"`
	// ReclaimInterval is how often the leader's reclaimer runs XAUTOCLAIM over every group.
	ReclaimInterval time.Duration `yaml:"reclaim_interval"`
	// ReclaimBatch is the COUNT of one XAUTOCLAIM call (entries settled per round trip).
	ReclaimBatch int `yaml:"reclaim_batch"`
	// TrimInterval is how often the leader trims the streams below the oldest entry still
	// pending or unread.
	TrimInterval time.Duration `yaml:"trim_interval"`
	// DeadLetterRetention is how long a dead letter is kept when nobody purges it.
	DeadLetterRetention time.Duration `yaml:"dead_letter_retention"`
	// AuditRetention is how long audit rows and ended (released or expired) leases are kept.
	AuditRetention time.Duration `yaml:"audit_retention"`
	// RetentionInterval is how often the leader deletes expired jobs, audit rows and ended leases.
	RetentionInterval time.Duration `yaml:"retention_interval"`
	// RetentionBatch is the most rows one retention statement deletes (short locks).
	RetentionBatch int `yaml:"retention_batch"`
	// ShutdownGrace bounds a graceful shutdown (finish in-flight work, then exit).
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// LogLevel is debug|info|warn|error (ORCH_LOG_LEVEL); LogFormat is json|text (ORCH_LOG_FORMAT).
	LogLevel  string `yaml:"log_level"`
	LogFormat string `yaml:"log_format"`
	// JobTypes are the job types the cluster knows; a submit of any other type is refused.
	JobTypes map[string]*JobType `yaml:"job_types"`
	// Worker configures the worker process.
	Worker Worker `yaml:"worker"`
	// TLS configures HTTPS on the API and for its clients (config/tls.go).
	TLS TLS `yaml:"tls"`
	// Leases configures lease placement, expiry and purging.
	Leases Leases `yaml:"leases"`
	// Telemetry configures how a process reads its node's GPUs.
	Telemetry Telemetry `yaml:"telemetry"`
	// Scheduler configures the leader's GPU scheduler (config/scheduler.go).
	Scheduler Scheduler `yaml:"scheduler"`
	// Admission configures admission control: token buckets and gates (config/admission.go).
	Admission Admission `yaml:"admission"`
	// Schedules configures the leader's schedule firer (config/schedules.go).
	Schedules Schedules `yaml:"schedules"`
	// Pools configures worker pools, the worker registry and the local provisioner (config/pools.go).
	Pools Pools `yaml:"pools"`
	// Webhooks configures subscriptions' deliveries, job callbacks and pre-run hooks
	// (config/webhooks.go).
	Webhooks Webhooks `yaml:"webhooks"`
	// Flows configures dependencies, workflows and fan-outs (config/flows.go).
	Flows Flows `yaml:"flows"`
	// Approvals configures the approval policies and their loops (config/flows.go).
	Approvals Approvals `yaml:"approvals"`
	// Security holds the stream cap and the metrics token (config/security.go): top-level keys.
	Security `yaml:",inline"`
	// Path is the file Load read ("" when none): the local provisioner's workers read it too.
	Path string `yaml:"-"`
}

// Leases configures leases: nothing runs without one, and a worker that stops renewing its
// lease loses its job.
type Leases struct {
	// TTL is the time to live of a job's lease: its worker renews it every TTL/3, and a lease
	// not renewed for TTL expires and its job is rescued (ORCH_LEASE_TTL_MS).
	TTL time.Duration `yaml:"ttl"`
	// SafetyMarginMB is the memory of every GPU that placement never hands out (CUDA contexts,
	// fragmentation, telemetry lag): free = total − max(used, reserved) − margin. 0 takes the
	// default; a margin cannot be switched off, only made small (1).
	SafetyMarginMB int64 `yaml:"safety_margin_mb"`
	// TelemetryFreshness is how old a GPU's telemetry may be for placement to trust it; a node
	// whose GPUs are all older is refused with telemetry_stale.
	TelemetryFreshness time.Duration `yaml:"telemetry_freshness"`
	// PurgeInterval is how often the lease purger expires leases past their expiry.
	PurgeInterval time.Duration `yaml:"purge_interval"`
}

// Telemetry configures the GPU telemetry provider of a process (telemetry.Auto).
type Telemetry struct {
	// SimGPUs simulates GPUs where NVML has none, e.g. "2x24576" (ORCH_SIM_GPUS).
	SimGPUs string `yaml:"sim_gpus"`
	// NVMLDisable skips NVML (ORCH_NVML_DISABLE=1), e.g. to simulate GPUs on a GPU host.
	NVMLDisable bool `yaml:"nvml_disable"`
	// NVMLLibrary is the path of libnvidia-ml.so (ORCH_NVML_LIBRARY; default: the loader's).
	NVMLLibrary string `yaml:"nvml_library"`
	// PollInterval is how often the node's GPUs are read and reported.
	PollInterval time.Duration `yaml:"poll_interval"`
}

// JobType describes one type of job: where it is delivered and how it is run and retried.
type JobType struct {
	// Name is the key in job_types (filled by Load).
	Name string `yaml:"-"`
	// Stream is the stream name (key stream:orchestrator:<stream>); default: the type name.
	Stream string `yaml:"stream"`
	// Handler is the worker handler that runs it: noop, sleep, exec or http; default: the type name.
	Handler string `yaml:"handler"`
	// Command fixes the exec command (a name in worker.commands) for exec jobs of this type; when
	// empty, the job's payload names it in its "command" field.
	Command string `yaml:"command"`
	// URL is where the http handler POSTs the payload.
	URL string `yaml:"url"`
	// MaxAttempts is the default attempt budget of a job of this type.
	MaxAttempts int `yaml:"max_attempts"`
	// Timeout is the default run-time limit of one attempt.
	Timeout time.Duration `yaml:"timeout"`
	// GPUMemoryMB is the GPU memory a job of this type needs (0: a CPU job).
	GPUMemoryMB int `yaml:"gpu_memory_mb"`
	// Priority is the default priority of a job of this type, 0..9 (higher first among the
	// GPU jobs a worker waits to place).
	Priority int `yaml:"priority"`
	// Backoff is the retry schedule of failed attempts.
	Backoff Backoff `yaml:"backoff"`
	// Retention is how long a finished job (done, cancelled, purged dead letter) is kept.
	Retention time.Duration `yaml:"retention"`
	// QueueLimit is the most pending jobs of the type (0: no limit); above it a submit is
	// routed to CPUFallback when set, and refused with queue_full otherwise.
	QueueLimit int `yaml:"queue_limit"`
	// CPUFallback is a CPU job type that takes the type's submits while its queue is full.
	CPUFallback string `yaml:"cpu_fallback"`
	// WaitForModel lets a submit name a model_id that no pool serves yet: the job waits
	// (no_pool_for_model) for a pool of the model instead of the submit being refused.
	WaitForModel bool `yaml:"wait_for_model"`
}

// Backoff is a capped exponential backoff with jitter.
type Backoff struct {
	Initial    time.Duration `yaml:"initial"`
	Multiplier float64       `yaml:"multiplier"`
	Max        time.Duration `yaml:"max"`
	// Jitter is the fraction (0..1) by which each delay is randomly shortened or lengthened.
	Jitter float64 `yaml:"jitter"`
}

// Worker configures a worker process.
type Worker struct {
	// ID names the worker (ORCH_WORKER_ID; default: hostname-pid).
	ID string `yaml:"id"`
	// PoolID is the pool the worker belongs to (ORCH_POOL_ID).
	PoolID string `yaml:"pool_id"`
	// APIURL is the orchestrator's base URL (ORCH_API_URL).
	APIURL string `yaml:"api_url"`
	// APIToken is the worker's bearer token (ORCH_API_TOKEN).
	APIToken string `yaml:"api_token"`
	// Types are the job types this worker serves (ORCH_WORKER_TYPES, comma separated); default: all
	// configured types whose handler the worker can run.
	Types []string `yaml:"types"`
	// Concurrency is how many jobs run at once (ORCH_WORKER_CONCURRENCY).
	Concurrency int `yaml:"concurrency"`
	// Batch is the most entries read per XREADGROUP.
	Batch int `yaml:"batch"`
	// Block is how long one XREADGROUP waits for entries.
	Block time.Duration `yaml:"block"`
	// Commands are the programs the exec handler may run, by name: argv only, never a shell.
	Commands map[string]*Command `yaml:"commands"`
	// Preload names the command (in Commands) a worker of a pool runs once, for its pool's
	// model, before it registers and takes jobs (ORCH_WORKER_PRELOAD); "" for none.
	Preload string `yaml:"preload"`
	// ModelID is the model the worker's pool serves (ORCH_MODEL_ID, which the local
	// provisioner sets); "": the model of the pool's latest preload event.
	ModelID string `yaml:"model_id"`
	// MetricsAddr is where the worker serves GET /metrics (ORCH_WORKER_METRICS_ADDR); "0"
	// disables it.
	MetricsAddr string `yaml:"metrics_addr"`
}

// Command is one program the exec handler may run.
type Command struct {
	// Argv is the program and its arguments; the job payload arrives on stdin.
	Argv []string `yaml:"argv"`
	// Env are extra KEY=VALUE entries for the process environment.
	Env []string `yaml:"env"`
	// Dir is the working directory (default: the worker's).
	Dir string `yaml:"dir"`
	// MaxOutputBytes caps the captured stdout kept as the result.
	MaxOutputBytes int `yaml:"max_output_bytes"`
}

// DefaultJobTypes are the job types of a configuration that names none.
func DefaultJobTypes() map[string]*JobType {
	return map[string]*JobType{
		"inference": {Stream: "inference_jobs", Handler: "http"},
		"preload":   {Stream: "preloads", Handler: "http"},
		"ingest":    {Stream: "ingest_events", Handler: "http"},
		"noop":      {Stream: "noop", Handler: "noop"},
		"sleep":     {Stream: "sleep", Handler: "sleep"},
	}
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// Handlers lists the handler names a job type may use.
var Handlers = []string{"noop", "sleep", "exec", "http"}

// Load reads the YAML file at path (skipped when empty), applies ORCH_* overrides from env, fills
// defaults and validates. getenv is os.Getenv in production.
func Load(path string, getenv func(string) string) (*Config, error) {
	c := &Config{}
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("parse config %s: %w", path, err)
		}
		c.Path = path
	}
	if err := c.applyEnv(getenv); err != nil {
		return nil, err
	}
	c.fillDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) applyEnv(getenv func(string) string) error {
	c.TLS.applyEnv(getenv)
	str := func(key string, dst *string) {
		if v := getenv(key); v != "" {
			*dst = v
		}
	}
	str("ORCH_HTTP_ADDR", &c.HTTPAddr)
	str("ORCH_MYSQL_DSN", &c.MySQLDSN)
	str("ORCH_REDIS_ADDR", &c.RedisAddr)
	str("ORCH_REDIS_PASSWORD", &c.RedisPassword)
	str("ORCH_REDIS_PREFIX", &c.RedisPrefix)
	str("ORCH_DATA_DIR", &c.DataDir)
	str("ORCH_EMBEDDED_REDIS_ADDR", &c.EmbeddedRedisAddr)
	str("ORCH_NODE_ID", &c.NodeID)
	str("ORCH_TOKENS_FILE", &c.TokensFile)
	str("ORCH_LOG_LEVEL", &c.LogLevel)
	str("ORCH_LOG_FORMAT", &c.LogFormat)
	str("ORCH_WORKER_ID", &c.Worker.ID)
	str("ORCH_POOL_ID", &c.Worker.PoolID)
	str("ORCH_WORKER_PRELOAD", &c.Worker.Preload)
	str("ORCH_MODEL_ID", &c.Worker.ModelID)
	str("ORCH_API_URL", &c.Worker.APIURL)
	str("ORCH_API_TOKEN", &c.Worker.APIToken)
	str("ORCH_WORKER_METRICS_ADDR", &c.Worker.MetricsAddr)
	str("ORCH_SIM_GPUS", &c.Telemetry.SimGPUs)
	str("ORCH_NVML_LIBRARY", &c.Telemetry.NVMLLibrary)
	str("ORCH_POOLS_PROVISIONER", &c.Pools.Provisioner)
	str("ORCH_WORKER_BINARY", &c.Pools.WorkerBinary)
	if err := boolEnv(getenv, "ORCH_NVML_DISABLE", &c.Telemetry.NVMLDisable); err != nil {
		return err
	}
	if err := boolEnv(getenv, "ORCH_SCHEDULER_DISABLE", &c.Scheduler.Disabled); err != nil {
		return err
	}
	if err := c.applyAdmissionEnv(getenv); err != nil {
		return err
	}
	if err := c.Schedules.applyEnv(getenv); err != nil {
		return err
	}
	if err := c.applySecurityEnv(getenv); err != nil {
		return err
	}
	if err := c.applyWebhooksEnv(getenv); err != nil {
		return err
	}
	if v := getenv("ORCH_NODE_LABELS"); v != "" {
		labels, err := nodelabels.Parse(v)
		if err != nil {
			return fmt.Errorf("config: ORCH_NODE_LABELS: %w", err)
		}
		c.NodeLabels = labels
	}
	if v := getenv("ORCH_WORKER_TYPES"); v != "" {
		c.Worker.Types = splitList(v)
	}
	// maxMS is the most milliseconds a time.Duration holds: more would wrap around.
	const maxMS = math.MaxInt64 / int64(time.Millisecond)
	ints := []struct {
		key string
		max int64
		set func(int64)
	}{
		{"ORCH_CLAIM_IDLE_MS", maxMS, func(n int64) { c.ClaimIdle = time.Duration(n) * time.Millisecond }},
		{"ORCH_MAX_PAYLOAD_BYTES", math.MaxInt64, func(n int64) { c.MaxPayloadBytes = n }},
		{"ORCH_SUBMIT_BATCH_CONCURRENCY", math.MaxInt32, func(n int64) { c.SubmitBatchConcurrency = int(n) }},
		{"ORCH_WORKER_CONCURRENCY", math.MaxInt32, func(n int64) { c.Worker.Concurrency = int(n) }},
		{"ORCH_LEASE_TTL_MS", maxMS, func(n int64) { c.Leases.TTL = time.Duration(n) * time.Millisecond }},
	}
	for _, e := range ints {
		v := getenv(e.key)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > e.max {
			return fmt.Errorf("config: %s=%q: want a positive integer of at most %d", e.key, v, e.max)
		}
		e.set(n)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *Config) fillDefaults() {
	c.HTTPAddr = cmp.Or(c.HTTPAddr, HTTPAddrDefault)
	c.MySQLDSN = cmp.Or(c.MySQLDSN, MySQLDSNDefault)
	c.RedisAddr = cmp.Or(c.RedisAddr, RedisAddrDefault)
	c.DataDir = cmp.Or(c.DataDir, DataDirDefault)
	c.EmbeddedRedisAddr = cmp.Or(c.EmbeddedRedisAddr, EmbeddedRedisAddrDefault)
	if c.NodeID == "" {
		c.NodeID, _ = os.Hostname()
	}
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, MaxPayloadBytesDefault)
	c.SubmitBatchConcurrency = cmp.Or(c.SubmitBatchConcurrency, SubmitBatchConcurrencyDefault)
	c.ClaimIdle = cmp.Or(c.ClaimIdle, ClaimIdleDefault)
	c.DispatchInterval = cmp.Or(c.DispatchInterval, DispatchIntervalDefault)
	c.DispatchBatch = cmp.Or(c.DispatchBatch, DispatchBatchDefault)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
	c.ReclaimInterval = cmp.Or(c.ReclaimInterval, ReclaimIntervalDefault)
	c.ReclaimBatch = cmp.Or(c.ReclaimBatch, ReclaimBatchDefault)
	c.TrimInterval = cmp.Or(c.TrimInterval, TrimIntervalDefault)
	c.DeadLetterRetention = cmp.Or(c.DeadLetterRetention, DeadLetterRetentionDefault)
	c.AuditRetention = cmp.Or(c.AuditRetention, AuditRetentionDefault)
	c.RetentionInterval = cmp.Or(c.RetentionInterval, RetentionIntervalDefault)
	c.RetentionBatch = cmp.Or(c.RetentionBatch, RetentionBatchDefault)
	c.LogLevel = cmp.Or(c.LogLevel, LogLevelDefault)
	c.LogFormat = cmp.Or(c.LogFormat, LogFormatDefault)
	if len(c.JobTypes) == 0 {
		c.JobTypes = DefaultJobTypes()
	}
	for name, t := range c.JobTypes {
		if t == nil {
			t = &JobType{}
			c.JobTypes[name] = t
		}
		t.Name = name
		t.Stream = cmp.Or(t.Stream, name)
		t.Handler = cmp.Or(t.Handler, name)
		t.MaxAttempts = cmp.Or(t.MaxAttempts, MaxAttemptsDefault)
		t.Timeout = cmp.Or(t.Timeout, JobTimeoutDefault)
		t.Backoff.Initial = cmp.Or(t.Backoff.Initial, BackoffInitialDefault)
		t.Backoff.Multiplier = cmp.Or(t.Backoff.Multiplier, BackoffMultiplierDefault)
		t.Backoff.Max = cmp.Or(t.Backoff.Max, BackoffMaxDefault)
		t.Retention = cmp.Or(t.Retention, RetentionDefault)
		if t.Backoff.Jitter == 0 {
			t.Backoff.Jitter = BackoffJitterDefault
		}
	}
	c.Leases.TTL = cmp.Or(c.Leases.TTL, LeaseTTLDefault)
	if c.Leases.SafetyMarginMB == 0 {
		c.Leases.SafetyMarginMB = LeaseSafetyMarginMBDefault
	}
	c.Leases.TelemetryFreshness = cmp.Or(c.Leases.TelemetryFreshness, LeaseTelemetryFreshnessDefault)
	c.Leases.PurgeInterval = cmp.Or(c.Leases.PurgeInterval, LeasePurgeIntervalDefault)
	c.Telemetry.PollInterval = cmp.Or(c.Telemetry.PollInterval, TelemetryPollIntervalDefault)
	c.Scheduler.fillDefaults()
	c.Admission.fillDefaults()
	c.Schedules.fillDefaults()
	c.Flows.fillDefaults()
	c.Approvals.fillDefaults()
	c.Security.fillDefaults()
	c.Webhooks.fillDefaults()
	c.fillPools()
	w := &c.Worker
	if w.ID == "" {
		host, _ := os.Hostname()
		w.ID = fmt.Sprintf("%s-%d", cmp.Or(host, "worker"), os.Getpid())
	}
	w.APIURL = cmp.Or(w.APIURL, "http://"+c.HTTPAddr)
	w.Concurrency = cmp.Or(w.Concurrency, WorkerConcurrencyDefault)
	w.Batch = cmp.Or(w.Batch, WorkerBatchDefault)
	w.Block = cmp.Or(w.Block, WorkerBlockDefault)
	w.MetricsAddr = cmp.Or(w.MetricsAddr, WorkerMetricsAddrDefault)
	for _, cmd := range w.Commands {
		if cmd != nil {
			cmd.MaxOutputBytes = cmp.Or(cmd.MaxOutputBytes, ExecMaxOutputBytesDefault)
		}
	}
}

// TypeNames returns the configured job type names, sorted.
func (c *Config) TypeNames() []string {
	names := make([]string, 0, len(c.JobTypes))
	for n := range c.JobTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// JobType returns the named type, or nil.
func (c *Config) JobType(name string) *JobType {
	return c.JobTypes[name]
}

// TypeOfStream returns the type whose stream is named stream, or nil. Streams are unique per
// type (Validate).
func (c *Config) TypeOfStream(stream string) *JobType {
	for _, t := range c.JobTypes {
		if t.Stream == stream {
			return t
		}
	}
	return nil
}

// boolEnv sets *dst from the environment variable key when it is set: true or false (1 or 0).
func boolEnv(getenv func(string) string, key string, dst *bool) error {
	v := getenv(key)
	if v == "" {
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("config: %s=%q: want true or false (1 or 0)", key, v)
	}
	*dst = b
	return nil
}
