package config

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/internal/hookurl"
)

// Defaults of the webhooks section (docs/architecture.md, "Webhooks").
const (
	// WebhooksIntervalDefault is the pace of the leader's webhook tail and sender when idle.
	WebhooksIntervalDefault = time.Second
	// WebhooksBatchDefault bounds the audit rows one pass of the tail reads, and the
	// deliveries one pass of the sender takes.
	WebhooksBatchDefault = 500
	// WebhooksConcurrencyDefault is how many deliveries are in flight at once.
	WebhooksConcurrencyDefault = 8
	// WebhooksConnectTimeoutDefault bounds the connection (and TLS handshake) of one attempt.
	WebhooksConnectTimeoutDefault = 5 * time.Second
	// WebhooksTimeoutDefault bounds one attempt, from the dial to the end of the answer.
	WebhooksTimeoutDefault = 10 * time.Second
	// WebhooksMaxAttemptsDefault is how many attempts a delivery gets before it is given up
	// (about a day with the default backoff).
	WebhooksMaxAttemptsDefault = 20
	// WebhooksMaxConsecutiveFailuresDefault disables an endpoint that failed this many
	// attempts in a row.
	WebhooksMaxConsecutiveFailuresDefault = 10
	// WebhooksGapWindowDefault is how long a missing audit id is waited for before the tail
	// gives it up: far longer than any transaction holds one.
	WebhooksGapWindowDefault = 10 * time.Minute
	// WebhooksMaxBodyBytesDefault caps a delivery's body (a job's result is left out past it).
	WebhooksMaxBodyBytesDefault = 64 << 10
	// WebhooksRetentionDefault is how long a delivery that ended (delivered or given up) is
	// kept for GET /webhooks/{id}/deliveries.
	WebhooksRetentionDefault = 7 * 24 * time.Hour
	// WebhooksPreRunTimeoutDefault bounds one call of a pre-run hook.
	WebhooksPreRunTimeoutDefault = 10 * time.Second
	// WebhookSecretMinLen is the shortest configured signing secret accepted.
	WebhookSecretMinLen = 16
)

// Backoff defaults of deliveries: 1 s doubling to 10 min, ± 20 %.
const (
	WebhooksBackoffInitialDefault = time.Second
	WebhooksBackoffMaxDefault     = 10 * time.Minute
)

// Webhooks configures the events the orchestrator POSTs out: to subscribed endpoints, to a
// job's callback_url, and to the pre-run hooks of job types.
type Webhooks struct {
	// AllowPrivate lets hooks reach loopback, private and link-local addresses
	// (ORCH_WEBHOOKS_ALLOW_PRIVATE): for a receiver in the cluster's own network, and tests.
	AllowPrivate bool `yaml:"allow_private"`
	// CallbackSecret is the cluster's callback key (ORCH_WEBHOOKS_CALLBACK_SECRET): each
	// agent's callbacks are signed with a key derived from it and the agent's name
	// (GET /webhooks/callback_secret). Unset: a submit with a callback_url is refused.
	CallbackSecret string `yaml:"callback_secret"`
	// CallbackSecretFile holds the callback secret (ORCH_WEBHOOKS_CALLBACK_SECRET_FILE), for
	// a secret mounted as a file; not together with CallbackSecret.
	CallbackSecretFile string `yaml:"callback_secret_file"`
	// PreRun maps a job type to its pre-run hook (ORCH_WEBHOOKS_PRE_RUN, "type=url,…"): called
	// before each attempt of a job of the type starts; 2xx lets it run, 4xx fails it for good,
	// anything else retries it.
	PreRun map[string]string `yaml:"pre_run"`
	// PreRunSecret signs the pre-run calls (ORCH_WEBHOOKS_PRE_RUN_SECRET). The orchestrator
	// refuses to start with PreRun and without it (RequirePreRunSecret); a worker, which reads
	// PreRun to know which types ask, needs no secret.
	PreRunSecret string `yaml:"pre_run_secret"`
	// PreRunTimeout bounds one pre-run call; a call that times out retries the job.
	PreRunTimeout time.Duration `yaml:"pre_run_timeout"`
	// Interval is the pace of the tail and the sender (ORCH_WEBHOOKS_INTERVAL_MS).
	Interval time.Duration `yaml:"interval"`
	// Batch bounds the audit rows a pass of the tail reads and the deliveries a pass of the
	// sender takes.
	Batch int `yaml:"batch"`
	// Concurrency is how many deliveries are in flight at once.
	Concurrency int `yaml:"concurrency"`
	// ConnectTimeout bounds a delivery's connection and TLS handshake; Timeout the whole
	// attempt.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	Timeout        time.Duration `yaml:"timeout"`
	// MaxAttempts is how many attempts a delivery gets before it is given up
	// (ORCH_WEBHOOKS_MAX_ATTEMPTS).
	MaxAttempts int `yaml:"max_attempts"`
	// MaxConsecutiveFailures disables an endpoint after that many failed attempts in a row
	// (ORCH_WEBHOOKS_MAX_CONSECUTIVE_FAILURES).
	MaxConsecutiveFailures int `yaml:"max_consecutive_failures"`
	// Backoff is the delay before a failed delivery, or a failing endpoint, is tried again
	// (its multiplier and jitter as a job type's).
	Backoff Backoff `yaml:"backoff"`
	// GapWindow is how long an audit id missing below the tail's cursor is looked for before
	// it is given up (ORCH_WEBHOOKS_GAP_WINDOW_MS).
	GapWindow time.Duration `yaml:"gap_window"`
	// MaxBodyBytes caps a delivery's body.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// Retention is how long a delivery that ended is kept.
	Retention time.Duration `yaml:"retention"`
}

// applyWebhooksEnv applies the ORCH_WEBHOOKS_* overrides and reads the callback secret file.
func (c *Config) applyWebhooksEnv(getenv func(string) string) error {
	w := &c.Webhooks
	if err := boolEnv(getenv, "ORCH_WEBHOOKS_ALLOW_PRIVATE", &w.AllowPrivate); err != nil {
		return err
	}
	for key, dst := range map[string]*string{
		"ORCH_WEBHOOKS_CALLBACK_SECRET":      &w.CallbackSecret,
		"ORCH_WEBHOOKS_CALLBACK_SECRET_FILE": &w.CallbackSecretFile,
		"ORCH_WEBHOOKS_PRE_RUN_SECRET":       &w.PreRunSecret,
	} {
		if v := getenv(key); v != "" {
			*dst = v
		}
	}
	if v := getenv("ORCH_WEBHOOKS_PRE_RUN"); v != "" {
		w.PreRun = map[string]string{}
		for _, kv := range splitList(v) {
			typ, u, ok := strings.Cut(kv, "=")
			if !ok || typ == "" || u == "" {
				return fmt.Errorf("config: ORCH_WEBHOOKS_PRE_RUN: %q: want type=url", kv)
			}
			w.PreRun[typ] = u
		}
	}
	for key, set := range map[string]func(int64){
		"ORCH_WEBHOOKS_INTERVAL_MS":              func(n int64) { w.Interval = time.Duration(n) * time.Millisecond },
		"ORCH_WEBHOOKS_GAP_WINDOW_MS":            func(n int64) { w.GapWindow = time.Duration(n) * time.Millisecond },
		"ORCH_WEBHOOKS_MAX_ATTEMPTS":             func(n int64) { w.MaxAttempts = int(n) },
		"ORCH_WEBHOOKS_MAX_CONSECUTIVE_FAILURES": func(n int64) { w.MaxConsecutiveFailures = int(n) },
	} {
		v := getenv(key)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n <= 0 {
			return fmt.Errorf("config: %s=%q: want a positive integer of at most %d", key, v, math.MaxInt32)
		}
		set(n)
	}
	if w.CallbackSecretFile == "" {
		return nil
	}
	if w.CallbackSecret != "" {
		return fmt.Errorf("config: webhooks.callback_secret and webhooks.callback_secret_file are both set: keep one")
	}
	var err error
	w.CallbackSecret, err = readSecretFile("webhooks.callback_secret_file", w.CallbackSecretFile)
	return err
}

func (w *Webhooks) fillDefaults() {
	w.Interval = cmp.Or(w.Interval, WebhooksIntervalDefault)
	w.Batch = cmp.Or(w.Batch, WebhooksBatchDefault)
	w.Concurrency = cmp.Or(w.Concurrency, WebhooksConcurrencyDefault)
	w.ConnectTimeout = cmp.Or(w.ConnectTimeout, WebhooksConnectTimeoutDefault)
	w.Timeout = cmp.Or(w.Timeout, WebhooksTimeoutDefault)
	w.MaxAttempts = cmp.Or(w.MaxAttempts, WebhooksMaxAttemptsDefault)
	w.MaxConsecutiveFailures = cmp.Or(w.MaxConsecutiveFailures, WebhooksMaxConsecutiveFailuresDefault)
	w.Backoff.Initial = cmp.Or(w.Backoff.Initial, WebhooksBackoffInitialDefault)
	w.Backoff.Multiplier = cmp.Or(w.Backoff.Multiplier, BackoffMultiplierDefault)
	w.Backoff.Max = cmp.Or(w.Backoff.Max, WebhooksBackoffMaxDefault)
	if w.Backoff.Jitter == 0 {
		w.Backoff.Jitter = BackoffJitterDefault
	}
	w.GapWindow = cmp.Or(w.GapWindow, WebhooksGapWindowDefault)
	w.MaxBodyBytes = cmp.Or(w.MaxBodyBytes, WebhooksMaxBodyBytesDefault)
	w.Retention = cmp.Or(w.Retention, WebhooksRetentionDefault)
	w.PreRunTimeout = cmp.Or(w.PreRunTimeout, WebhooksPreRunTimeoutDefault)
}

// validateWebhooks checks the webhooks section against the job types.
func (c *Config) validateWebhooks() []error {
	w := &c.Webhooks
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: webhooks."+format, args...)) }
	for _, s := range [][2]string{{"callback_secret", w.CallbackSecret}, {"pre_run_secret", w.PreRunSecret}} {
		if v := s[1]; v != "" && (len(v) < WebhookSecretMinLen || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f })) {
			bad("%s must be at least %d characters, without spaces or control characters", s[0], WebhookSecretMinLen)
		}
	}
	types := make([]string, 0, len(w.PreRun))
	for typ := range w.PreRun {
		types = append(types, typ)
	}
	sort.Strings(types)
	for _, typ := range types {
		if c.JobType(typ) == nil {
			bad("pre_run.%s: no such job type", typ)
		}
		if _, err := hookurl.Check(w.PreRun[typ], w.AllowPrivate); err != nil {
			bad("pre_run.%s: the URL %s", typ, err)
		}
	}
	for _, r := range []struct {
		key      string
		v, lo, h int
	}{
		{"batch", w.Batch, 1, 10000}, {"concurrency", w.Concurrency, 1, 256}, {"max_attempts", w.MaxAttempts, 1, 1000},
		{"max_consecutive_failures", w.MaxConsecutiveFailures, 1, 1000}, {"max_body_bytes", w.MaxBodyBytes, 1 << 10, 16 << 20},
	} {
		if r.v < r.lo || r.v > r.h {
			bad("%s must be in %d..%d, not %d", r.key, r.lo, r.h, r.v)
		}
	}
	if w.Interval < 10*time.Millisecond || w.Interval > time.Minute {
		bad("interval %s: want 10ms..1m", w.Interval)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"connect_timeout", w.ConnectTimeout}, {"timeout", w.Timeout}, {"gap_window", w.GapWindow},
		{"retention", w.Retention}, {"pre_run_timeout", w.PreRunTimeout}, {"backoff.initial", w.Backoff.Initial},
		{"backoff.max", w.Backoff.Max},
	} {
		if d.v <= 0 {
			bad("%s must be positive", d.key)
		}
	}
	if w.Backoff.Multiplier < 1 || w.Backoff.Jitter < 0 || w.Backoff.Jitter > 1 {
		bad("backoff: multiplier must be at least 1 and jitter in 0..1")
	}
	return errs
}

// RequirePreRunSecret is the orchestrator's check of the pre-run hooks: they need
// pre_run_secret, so that a hook can tell the orchestrator's calls from anyone's. Workers
// load the same section without it.
func (w Webhooks) RequirePreRunSecret() error {
	if len(w.PreRun) > 0 && w.PreRunSecret == "" {
		return fmt.Errorf("config: webhooks.pre_run_secret is required with webhooks.pre_run hooks: the hooks must be " +
			"able to tell the orchestrator's calls from others (ORCH_WEBHOOKS_PRE_RUN_SECRET)")
	}
	return nil
}
