package config

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Defaults of the schedules section.
const (
	// SchedulesIntervalDefault is the longest the firer sleeps: it wakes at the next fire
	// time, and at least this often, so that a schedule created or edited on another
	// instance, or a queued fire whose job may now be made, is seen within it.
	SchedulesIntervalDefault = time.Second
	// SchedulesMisfireGraceDefault is how late a fire may be and still be an ordinary one: a
	// failover (a few seconds) loses no fire, whatever catch_up says. An older fire time was
	// missed, and its schedule's catch_up decides.
	SchedulesMisfireGraceDefault = time.Minute
	// SchedulesMaxQueuedDefault bounds the queued fires of one schedule (on_overlap queue).
	SchedulesMaxQueuedDefault = 10
)

// Schedules configures the leader's schedule firer (schedules/): it creates the jobs of the
// schedules' fire times.
type Schedules struct {
	// Disabled stops the firer (ORCH_SCHEDULES_DISABLE=1): schedules are still managed through
	// the API, and fire times pass unfired until it runs again (then catch_up decides).
	Disabled bool `yaml:"disabled"`
	// Interval is the longest the firer sleeps between passes (ORCH_SCHEDULES_INTERVAL_MS).
	Interval time.Duration `yaml:"interval"`
	// MisfireGrace is how late a fire time may be handled as on time; an older one was missed
	// (ORCH_SCHEDULES_MISFIRE_GRACE_MS).
	MisfireGrace time.Duration `yaml:"misfire_grace"`
	// MaxQueued is the most fires one schedule may have queued, waiting for one of its jobs to
	// end; a fire past it is skipped as queue_full.
	MaxQueued int `yaml:"max_queued"`
}

func (s *Schedules) fillDefaults() {
	s.Interval = cmp.Or(s.Interval, SchedulesIntervalDefault)
	s.MisfireGrace = cmp.Or(s.MisfireGrace, SchedulesMisfireGraceDefault)
	s.MaxQueued = cmp.Or(s.MaxQueued, SchedulesMaxQueuedDefault)
}

func (s *Schedules) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if s.Interval < 10*time.Millisecond || s.Interval > time.Minute {
		bad("schedules.interval %s: want 10ms..1m", s.Interval)
	}
	if s.MisfireGrace < time.Second || s.MisfireGrace > 24*time.Hour {
		bad("schedules.misfire_grace %s: want 1s..24h", s.MisfireGrace)
	}
	if s.MaxQueued < 1 || s.MaxQueued > 1000 {
		bad("schedules.max_queued %d: want 1..1000", s.MaxQueued)
	}
	return errs
}

func (s *Schedules) applyEnv(getenv func(string) string) error {
	if err := boolEnv(getenv, "ORCH_SCHEDULES_DISABLE", &s.Disabled); err != nil {
		return err
	}
	for key, dst := range map[string]*time.Duration{
		"ORCH_SCHEDULES_INTERVAL_MS":      &s.Interval,
		"ORCH_SCHEDULES_MISFIRE_GRACE_MS": &s.MisfireGrace,
	} {
		v := getenv(key)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > math.MaxInt64/int64(time.Millisecond) {
			return fmt.Errorf("config: %s=%q: want a positive number of milliseconds", key, v)
		}
		*dst = time.Duration(n) * time.Millisecond
	}
	return nil
}
