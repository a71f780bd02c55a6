package config

import (
	"cmp"
	"fmt"
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
