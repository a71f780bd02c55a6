package config

import (
	"cmp"
	"fmt"
	"math"
	"time"
)

// Defaults of admission control (package admission).
const (
	// AdmissionRatePerSecDefault is the sustained rate of the default policy: a guard against a
	// runaway client rather than a fair share, which is what per-agent policies are for.
	AdmissionRatePerSecDefault = 5000.0
	// AdmissionGPUHighWatermarkPctDefault closes the GPU gate: cluster GPU memory in use above
	// this percentage.
	AdmissionGPUHighWatermarkPctDefault = 90.0
	// AdmissionGPULowWatermarkPctDefault reopens it once the use falls below this percentage.
	AdmissionGPULowWatermarkPctDefault = 80.0
	// AdmissionGPUHoldDefault is the least time the GPU gate stays closed.
	AdmissionGPUHoldDefault = 30 * time.Second
	// AdmissionRefreshIntervalDefault is how often every instance rereads the policies, the GPU
	// telemetry and the queue backlogs.
	AdmissionRefreshIntervalDefault = time.Second
	// AdmissionLimiterTimeoutDefault bounds one token-bucket call to Redis, so that a stalled
	// Redis costs a submit this much, not the client's whole timeout (and only until the
	// limiter is marked down: then requests skip Redis until it answers a ping again).
	AdmissionLimiterTimeoutDefault = time.Second
)

// What the limiter does while Redis is unreachable (Admission.LimiterDownGPU/CPU).
const (
	LimiterDownOpen   = "open"
	LimiterDownClosed = "closed"
)

// AdmissionBurstFor is the burst of a policy that names a rate but no burst: two seconds' worth
// of requests, at least one.
func AdmissionBurstFor(ratePerSec float64) int {
	return max(1, int(math.Ceil(2*ratePerSec)))
}

// Admission configures admission control: per-agent token buckets and the cluster-wide gates
// (GPU memory pressure, queue depth per type).
type Admission struct {
	// Disabled turns admission control off: every submit and lease request is admitted, and
	// nothing reads Redis or the gates for it (ORCH_ADMISSION_DISABLED).
	Disabled bool `yaml:"disabled"`
	// DefaultPolicy applies to every agent without a policy of its own, until a policy of the
	// agent "*" is stored (PUT /control/admission), which replaces it at run time.
	DefaultPolicy AdmissionPolicy `yaml:"default_policy"`
	// GPUHighWatermarkPct closes the GPU gate (GPU job types and GPU leases are refused) when
	// the cluster's GPU memory in use, over GPUs with fresh telemetry, is above it.
	GPUHighWatermarkPct float64 `yaml:"gpu_high_watermark_pct"`
	// GPULowWatermarkPct reopens the gate once the use is below it and GPUHold has passed.
	GPULowWatermarkPct float64 `yaml:"gpu_low_watermark_pct"`
	// GPUHold is the least time the gate stays closed after the use was last seen above the
	// high watermark, so that it does not flap.
	GPUHold time.Duration `yaml:"gpu_hold"`
	// RefreshInterval is how often every instance rereads the policies, the GPU telemetry and
	// the queue backlogs; a policy change reaches every instance within it.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// LimiterTimeout bounds one token-bucket call to Redis.
	LimiterTimeout time.Duration `yaml:"limiter_timeout"`
	// LimiterDownGPU is what the token bucket does for GPU job types and GPU leases while
	// Redis is unreachable: closed (refuse, 503) or open (admit unlimited).
	LimiterDownGPU string `yaml:"limiter_down_gpu"`
	// LimiterDownCPU is the same for CPU job types and CPU leases.
	LimiterDownCPU string `yaml:"limiter_down_cpu"`
}

// AdmissionPolicy is a token bucket and a cap on unfinished jobs.
type AdmissionPolicy struct {
	// RatePerSec is the sustained rate of submits and lease requests (fractions allowed).
	RatePerSec float64 `yaml:"rate_per_sec"`
	// Burst is how many requests are admitted at once by an idle bucket (default: 2 s worth).
	Burst int `yaml:"burst"`
	// MaxPending caps the agent's non-terminal jobs; 0: no cap.
	MaxPending int `yaml:"max_pending"`
	// MaxGPUMemoryMB caps the GPU memory an agent holds at once in active gpu leases (memory
	// on each GPU of a lease counts); 0: no cap. As a default it applies to each agent, not
	// to all of them together.
	MaxGPUMemoryMB int64 `yaml:"max_gpu_memory_mb"`
	// MaxGPUs caps the GPUs an agent holds at once (the sum of its active gpu leases' GPU
	// counts); 0: no cap.
	MaxGPUs int `yaml:"max_gpus"`
}

// Bounds of the GPU quota of a policy: far past any cluster, they only catch a unit mistake
// (bytes for megabytes) or an overflowing product.
const (
	AdmissionMaxGPUMemoryMBMax = 1 << 30 // 1 EiB in MB
	AdmissionMaxGPUsMax        = 1 << 20
)

func (c *Config) applyAdmissionEnv(getenv func(string) string) error {
	if err := boolEnv(getenv, "ORCH_ADMISSION_DISABLED", &c.Admission.Disabled); err != nil {
		return err
	}
	return nil
}

func (a *Admission) fillDefaults() {
	p := &a.DefaultPolicy
	p.RatePerSec = cmp.Or(p.RatePerSec, AdmissionRatePerSecDefault)
	p.Burst = cmp.Or(p.Burst, AdmissionBurstFor(p.RatePerSec))
	a.GPUHighWatermarkPct = cmp.Or(a.GPUHighWatermarkPct, AdmissionGPUHighWatermarkPctDefault)
	a.GPULowWatermarkPct = cmp.Or(a.GPULowWatermarkPct, AdmissionGPULowWatermarkPctDefault)
	a.GPUHold = cmp.Or(a.GPUHold, AdmissionGPUHoldDefault)
	a.RefreshInterval = cmp.Or(a.RefreshInterval, AdmissionRefreshIntervalDefault)
	a.LimiterTimeout = cmp.Or(a.LimiterTimeout, AdmissionLimiterTimeoutDefault)
	a.LimiterDownGPU = cmp.Or(a.LimiterDownGPU, LimiterDownClosed)
	a.LimiterDownCPU = cmp.Or(a.LimiterDownCPU, LimiterDownOpen)
}

// AdmissionPolicyError is an invalid admission policy; Field names the offending key.
type AdmissionPolicyError struct {
	Field   string
	Message string
}

// Error implements error.
func (e *AdmissionPolicyError) Error() string { return e.Field + " " + e.Message }

// ValidateAdmissionPolicy checks the values of a policy, of the configuration or of the API
// (PUT /control/admission): the bounds are the same for both.
func ValidateAdmissionPolicy(p AdmissionPolicy) error {
	switch {
	case !(p.RatePerSec >= 0.001 && p.RatePerSec <= 1e6):
		return &AdmissionPolicyError{"rate_per_sec", fmt.Sprintf("%v: want 0.001..1000000", p.RatePerSec)}
	case p.Burst < 1 || p.Burst > 1e7:
		return &AdmissionPolicyError{"burst", fmt.Sprintf("%d: want 1..10000000", p.Burst)}
	case p.MaxPending < 0 || p.MaxPending > 1e8:
		return &AdmissionPolicyError{"max_pending", fmt.Sprintf("%d: want 0 (no cap)..100000000", p.MaxPending)}
	case p.MaxGPUMemoryMB < 0 || p.MaxGPUMemoryMB > AdmissionMaxGPUMemoryMBMax:
		return &AdmissionPolicyError{"max_gpu_memory_mb", fmt.Sprintf("%d: want 0 (no cap)..%d", p.MaxGPUMemoryMB, AdmissionMaxGPUMemoryMBMax)}
	case p.MaxGPUs < 0 || p.MaxGPUs > AdmissionMaxGPUsMax:
		return &AdmissionPolicyError{"max_gpus", fmt.Sprintf("%d: want 0 (no cap)..%d", p.MaxGPUs, AdmissionMaxGPUsMax)}
	}
	return nil
}

// validateAdmission checks the admission section and the admission settings of the job types.
func (c *Config) validateAdmission() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	a := c.Admission
	if err := ValidateAdmissionPolicy(a.DefaultPolicy); err != nil {
		bad("admission.default_policy.%w", err)
	}
	if !(a.GPULowWatermarkPct > 0 && a.GPULowWatermarkPct < a.GPUHighWatermarkPct && a.GPUHighWatermarkPct <= 100) {
		bad("admission: want 0 < gpu_low_watermark_pct (%v) < gpu_high_watermark_pct (%v) <= 100",
			a.GPULowWatermarkPct, a.GPUHighWatermarkPct)
	}
	if a.GPUHold < 0 {
		bad("admission.gpu_hold must not be negative")
	}
	if a.RefreshInterval < 100*time.Millisecond || a.RefreshInterval > time.Minute {
		bad("admission.refresh_interval %s: want 100ms..1m", a.RefreshInterval)
	}
	if a.LimiterTimeout <= 0 {
		bad("admission.limiter_timeout must be positive")
	}
	for key, v := range map[string]string{"limiter_down_gpu": a.LimiterDownGPU, "limiter_down_cpu": a.LimiterDownCPU} {
		if v != LimiterDownOpen && v != LimiterDownClosed {
			bad("admission.%s %q: want %s or %s", key, v, LimiterDownOpen, LimiterDownClosed)
		}
	}
	for _, name := range c.TypeNames() {
		t := c.JobTypes[name]
		if t.QueueLimit < 0 {
			bad("job_types.%s.queue_limit must not be negative (0: no limit)", name)
		}
		if t.CPUFallback == "" {
			continue
		}
		fb := c.JobTypes[t.CPUFallback]
		switch {
		case fb == nil:
			bad("job_types.%s.cpu_fallback %q: no such job type", name, t.CPUFallback)
		case t.CPUFallback == name:
			bad("job_types.%s.cpu_fallback: a type cannot be its own fallback", name)
		case fb.GPUMemoryMB > 0:
			bad("job_types.%s.cpu_fallback %q is a GPU type (gpu_memory_mb %d): a fallback must be a CPU type",
				name, t.CPUFallback, fb.GPUMemoryMB)
		case t.QueueLimit == 0:
			bad("job_types.%s.cpu_fallback needs a queue_limit: the fallback takes the jobs above it", name)
		}
	}
	return errs
}
