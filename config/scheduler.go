package config

import (
	"cmp"
	"fmt"
	"time"
)

// Defaults of the scheduler section.
const (
	// SchedulerIntervalDefault is the scheduler's slow tick: a submit, a release, a job's end
	// or a telemetry report wakes it at once, the tick covers a wake that was lost.
	SchedulerIntervalDefault = time.Second
	// SchedulerReserveAfterDefault is how long a GPU job may fit nowhere before the scheduler
	// holds a node for it.
	SchedulerReserveAfterDefault = 30 * time.Second
	// SchedulerBatchDefault bounds the waiting jobs one pass considers.
	SchedulerBatchDefault = 500
	// SchedulerPolicyDefault is best fit.
	SchedulerPolicyDefault = "best_fit"
)

// Scheduler configures the leader's GPU scheduler (scheduler/, engine/schedule.go): it places
// pending GPU jobs on a node and GPUs with room, reserving their lease in the transaction that
// places them, and publishes each to that node's stream of its type.
type Scheduler struct {
	// Disabled turns the scheduler off (ORCH_SCHEDULER_DISABLE=1): GPU jobs are then published
	// to their type's stream like CPU jobs, and each claim places its job on the claiming
	// worker's node or refuses it with retry_later.
	Disabled bool `yaml:"disabled"`
	// Policy is best_fit (the default: the node whose GPUs are left with the least free
	// memory) or spread (the most).
	Policy string `yaml:"policy"`
	// Interval is the slow tick between passes when nothing wakes the scheduler.
	Interval time.Duration `yaml:"interval"`
	// ReserveAfter is how long the first job in line may fit nowhere before a node is held for
	// it: no job behind it is placed on that node until it is.
	ReserveAfter time.Duration `yaml:"reserve_after"`
	// Batch is how many waiting jobs one pass considers (by priority and by age).
	Batch int `yaml:"batch"`
}

func (s *Scheduler) fillDefaults() {
	s.Policy = cmp.Or(s.Policy, SchedulerPolicyDefault)
	s.Interval = cmp.Or(s.Interval, SchedulerIntervalDefault)
	s.ReserveAfter = cmp.Or(s.ReserveAfter, SchedulerReserveAfterDefault)
	s.Batch = cmp.Or(s.Batch, SchedulerBatchDefault)
}

func (s *Scheduler) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if s.Policy != "best_fit" && s.Policy != "spread" {
		bad("scheduler.policy %q: want best_fit or spread", s.Policy)
	}
	if s.Interval < 10*time.Millisecond || s.Interval > time.Minute {
		bad("scheduler.interval %s: want 10ms..1m", s.Interval)
	}
	if s.ReserveAfter < 0 {
		bad("scheduler.reserve_after must not be negative")
	}
	if s.Batch < 1 || s.Batch > 10000 {
		bad("scheduler.batch %d: want 1..10000", s.Batch)
	}
	return errs
}
