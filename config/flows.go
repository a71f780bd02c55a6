package config

import (
	"cmp"
	"fmt"
	"strings"
	"time"
)

// Defaults of the flows section.
const (
	// FlowsResolveIntervalDefault is the resolver's slow tick: the end of a job that others
	// wait for wakes it at once, the tick covers a wake that was lost.
	FlowsResolveIntervalDefault = 2 * time.Second
	// FlowsResolveBatchDefault bounds the waiting jobs one query of a pass returns.
	FlowsResolveBatchDefault = 200
	// FlowsParentResultsMaxBytesDefault caps the parents' results a claim hands a worker, all
	// parents together (a fan-out parent's result of its children's, likewise).
	FlowsParentResultsMaxBytesDefault = 64 << 10
	// FlowsParentResultsMaxBytesLimit keeps the parents' results within what one environment
	// variable of a process may hold (Linux: 128 KiB), since exec hands them over as
	// ORCH_PARENTS.
	FlowsParentResultsMaxBytesLimit = 100 << 10
)

// Flows configures jobs that wait for other jobs, workflows and fan-outs (engine/flows*.go,
// flows/).
type Flows struct {
	// ResolveInterval is the leader's resolver's slow tick (10ms..1m).
	ResolveInterval time.Duration `yaml:"resolve_interval"`
	// ResolveBatch is how many waiting jobs one query of a pass returns (1..5000).
	ResolveBatch int `yaml:"resolve_batch"`
	// ParentResultsMaxBytes caps the parents' results a claim carries, all parents together
	// (1..FlowsParentResultsMaxBytesLimit): a result that does not fit is left out and flagged
	// truncated. A fan-out parent's result (its children's, by node) has the same cap.
	ParentResultsMaxBytes int `yaml:"parent_results_max_bytes"`
}

func (f *Flows) fillDefaults() {
	f.ResolveInterval = cmp.Or(f.ResolveInterval, FlowsResolveIntervalDefault)
	f.ResolveBatch = cmp.Or(f.ResolveBatch, FlowsResolveBatchDefault)
	f.ParentResultsMaxBytes = cmp.Or(f.ParentResultsMaxBytes, FlowsParentResultsMaxBytesDefault)
}

func (f *Flows) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if f.ResolveInterval < 10*time.Millisecond || f.ResolveInterval > time.Minute {
		bad("flows.resolve_interval %s: want 10ms..1m", f.ResolveInterval)
	}
	if f.ResolveBatch < 1 || f.ResolveBatch > 5000 {
		bad("flows.resolve_batch %d: want 1..5000", f.ResolveBatch)
	}
	if f.ParentResultsMaxBytes < 1 || f.ParentResultsMaxBytes > FlowsParentResultsMaxBytesLimit {
		bad("flows.parent_results_max_bytes %d: want 1..%d", f.ParentResultsMaxBytes, FlowsParentResultsMaxBytesLimit)
	}
	return errs
}

// Defaults of the approvals section.
const (
	// ApprovalsRefreshIntervalDefault is how often every instance rereads the approval
	// policies set at run time.
	ApprovalsRefreshIntervalDefault = 5 * time.Second
	// ApprovalsExpireIntervalDefault is how often the leader looks for approval requests past
	// their TTL.
	ApprovalsExpireIntervalDefault = 5 * time.Second
	// ApprovalTTLDefault is how long a request waits for its approvers when its policy names
	// no ttl.
	ApprovalTTLDefault = 24 * time.Hour
	// ApprovalTTLMax bounds a policy's ttl.
	ApprovalTTLMax = 30 * 24 * time.Hour
)

// Approvals configures the approval of risky work (engine/approvals*.go, flows/).
type Approvals struct {
	// RefreshInterval is how often every instance rereads the policies set at run time
	// (PUT /approvals/policies); 100ms..1m.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// ExpireInterval is the pace of the leader's expirer of requests past their TTL; 10ms..1m.
	ExpireInterval time.Duration `yaml:"expire_interval"`
	// Policies hold matching submits until approved, beside those set at run time (one of the
	// same name set at run time wins).
	Policies []ApprovalPolicy `yaml:"policies"`
}

// ApprovalPolicy holds the submits it matches for a person's approval: those of its type, of
// its agent, needing at least min_gpus GPUs or min_gpu_memory_mb of GPU memory in all (every
// criterion set must hold; at least one must be set).
type ApprovalPolicy struct {
	Name           string `yaml:"name"`
	Type           string `yaml:"type"`
	Agent          string `yaml:"agent"`
	MinGPUs        int    `yaml:"min_gpus"`
	MinGPUMemoryMB int64  `yaml:"min_gpu_memory_mb"`
	// TwoKey asks two distinct approvers.
	TwoKey bool `yaml:"two_key"`
	// TTL is how long a request waits (default ApprovalTTLDefault, at most ApprovalTTLMax).
	TTL time.Duration `yaml:"ttl"`
	// OnExpiry is reject (the default: the job is cancelled) or escalate (it waits on for an
	// admin). Either way the expiry is an event.
	OnExpiry string `yaml:"on_expiry"`
}

func (a *Approvals) fillDefaults() {
	a.RefreshInterval = cmp.Or(a.RefreshInterval, ApprovalsRefreshIntervalDefault)
	a.ExpireInterval = cmp.Or(a.ExpireInterval, ApprovalsExpireIntervalDefault)
	for i := range a.Policies {
		p := &a.Policies[i]
		p.TTL = cmp.Or(p.TTL, ApprovalTTLDefault)
		p.OnExpiry = cmp.Or(p.OnExpiry, "reject")
	}
}

func (c *Config) validateApprovals() []error {
	a := &c.Approvals
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if a.RefreshInterval < 100*time.Millisecond || a.RefreshInterval > time.Minute {
		bad("approvals.refresh_interval %s: want 100ms..1m", a.RefreshInterval)
	}
	if a.ExpireInterval < 10*time.Millisecond || a.ExpireInterval > time.Minute {
		bad("approvals.expire_interval %s: want 10ms..1m", a.ExpireInterval)
	}
	names := map[string]bool{}
	for i, p := range a.Policies {
		at := fmt.Sprintf("approvals.policies[%d]", i)
		switch {
		case !nameRE.MatchString(strings.ReplaceAll(p.Name, "-", "_")):
			bad("%s.name %q: want a lower-case name (a-z 0-9 _ -, at most 63)", at, p.Name)
		case names[p.Name]:
			bad("%s.name %q: named twice", at, p.Name)
		}
		names[p.Name] = true
		if p.Type != "" && c.JobType(p.Type) == nil {
			bad("%s.type %q: not a configured job type", at, p.Type)
		}
		if p.Type == "" && p.Agent == "" && p.MinGPUs == 0 && p.MinGPUMemoryMB == 0 {
			bad("%s: matches every job; set type, agent, min_gpus or min_gpu_memory_mb", at)
		}
		if p.MinGPUs < 0 || p.MinGPUMemoryMB < 0 {
			bad("%s: min_gpus and min_gpu_memory_mb must not be negative", at)
		}
		if p.TTL < time.Second || p.TTL > ApprovalTTLMax {
			bad("%s.ttl %s: want 1s..%s", at, p.TTL, ApprovalTTLMax)
		}
		if p.OnExpiry != "reject" && p.OnExpiry != "escalate" {
			bad("%s.on_expiry %q: want reject or escalate", at, p.OnExpiry)
		}
	}
	return errs
}
