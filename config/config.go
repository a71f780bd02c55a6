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
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
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
	// NodeID names this host (ORCH_NODE_ID; default: the hostname).
	NodeID string `yaml:"node_id"`
	// TokensFile holds the API tokens as SHA-256 hashes with their roles (ORCH_TOKENS_FILE).
	TokensFile string `yaml:"tokens_file"`
	// MaxPayloadBytes caps a job payload (ORCH_MAX_PAYLOAD_BYTES).
	MaxPayloadBytes int64 `yaml:"max_payload_bytes"`
	// ClaimIdle is how long a stream entry may stay unacknowledged before the reclaimer looks at
	// it (ORCH_CLAIM_IDLE_MS).
	ClaimIdle time.Duration `yaml:"claim_idle"`
	// DispatchInterval is how often the dispatcher looks for unpublished due jobs.
	DispatchInterval time.Duration `yaml:"dispatch_interval"`
	// DispatchBatch is how many jobs the dispatcher publishes per pass at most.
	DispatchBatch int `yaml:"dispatch_batch"`
	// ShutdownGrace bounds a graceful shutdown (finish in-flight work, then exit).
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// LogLevel is debug|info|warn|error (ORCH_LOG_LEVEL); LogFormat is json|text (ORCH_LOG_FORMAT).
	LogLevel  string `yaml:"log_level"`
	LogFormat string `yaml:"log_format"`
	// JobTypes are the job types the cluster knows; a submit of any other type is refused.
	JobTypes map[string]*JobType `yaml:"job_types"`
	// Worker configures the worker process.
	Worker Worker `yaml:"worker"`
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
	// Backoff is the retry schedule of failed attempts.
	Backoff Backoff `yaml:"backoff"`
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
	str("ORCH_NODE_ID", &c.NodeID)
	str("ORCH_TOKENS_FILE", &c.TokensFile)
	str("ORCH_LOG_LEVEL", &c.LogLevel)
	str("ORCH_LOG_FORMAT", &c.LogFormat)
	str("ORCH_WORKER_ID", &c.Worker.ID)
	str("ORCH_POOL_ID", &c.Worker.PoolID)
	str("ORCH_API_URL", &c.Worker.APIURL)
	str("ORCH_API_TOKEN", &c.Worker.APIToken)
	if v := getenv("ORCH_WORKER_TYPES"); v != "" {
		c.Worker.Types = splitList(v)
	}
	ints := []struct {
		key string
		set func(int64)
	}{
		{"ORCH_CLAIM_IDLE_MS", func(n int64) { c.ClaimIdle = time.Duration(n) * time.Millisecond }},
		{"ORCH_MAX_PAYLOAD_BYTES", func(n int64) { c.MaxPayloadBytes = n }},
		{"ORCH_WORKER_CONCURRENCY", func(n int64) { c.Worker.Concurrency = int(n) }},
	}
	for _, e := range ints {
		v := getenv(e.key)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("config: %s=%q: want a positive integer", e.key, v)
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
	if c.NodeID == "" {
		c.NodeID, _ = os.Hostname()
	}
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, MaxPayloadBytesDefault)
	c.ClaimIdle = cmp.Or(c.ClaimIdle, ClaimIdleDefault)
	c.DispatchInterval = cmp.Or(c.DispatchInterval, DispatchIntervalDefault)
	c.DispatchBatch = cmp.Or(c.DispatchBatch, DispatchBatchDefault)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
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
		if t.Backoff.Jitter == 0 {
			t.Backoff.Jitter = BackoffJitterDefault
		}
	}
	w := &c.Worker
	if w.ID == "" {
		host, _ := os.Hostname()
		w.ID = fmt.Sprintf("%s-%d", cmp.Or(host, "worker"), os.Getpid())
	}
	w.APIURL = cmp.Or(w.APIURL, "http://"+c.HTTPAddr)
	w.Concurrency = cmp.Or(w.Concurrency, WorkerConcurrencyDefault)
	w.Batch = cmp.Or(w.Batch, WorkerBatchDefault)
	w.Block = cmp.Or(w.Block, WorkerBlockDefault)
	for _, cmd := range w.Commands {
		if cmd != nil {
			cmd.MaxOutputBytes = cmp.Or(cmd.MaxOutputBytes, ExecMaxOutputBytesDefault)
		}
	}
}

// Validate fails fast on a configuration that cannot work, naming the key.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if c.MaxPayloadBytes <= 0 {
		bad("max_payload_bytes must be positive")
	}
	if c.DispatchBatch <= 0 || c.DispatchBatch > 10000 {
		bad("dispatch_batch must be in 1..10000")
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
	streams := map[string]string{}
	for _, name := range c.TypeNames() {
		t := c.JobTypes[name]
		if !nameRE.MatchString(name) {
			bad("job_types.%s: a type name is lower case letters, digits and _ (at most 63)", name)
		}
		if !nameRE.MatchString(t.Stream) {
			bad("job_types.%s.stream %q: lower case letters, digits and _", name, t.Stream)
		}
		if other, dup := streams[t.Stream]; dup {
			bad("job_types.%s.stream %q is also the stream of %s", name, t.Stream, other)
		}
		streams[t.Stream] = name
		if t.Stream == "dlq" || t.Stream == "control" {
			bad("job_types.%s.stream %q is reserved", name, t.Stream)
		}
		known := false
		for _, h := range Handlers {
			known = known || h == t.Handler
		}
		if !known {
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
		if t.GPUMemoryMB < 0 {
			bad("job_types.%s.gpu_memory_mb must not be negative", name)
		}
		b := t.Backoff
		if b.Initial <= 0 || b.Max < b.Initial || b.Multiplier < 1 || b.Jitter < 0 || b.Jitter > 1 {
			bad("job_types.%s.backoff: want 0 < initial <= max, multiplier >= 1, 0 <= jitter <= 1", name)
		}
	}
	for name, cmd := range c.Worker.Commands {
		if cmd == nil || len(cmd.Argv) == 0 || cmd.Argv[0] == "" {
			bad("worker.commands.%s.argv must name a program", name)
		}
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
	return errors.Join(errs...)
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
