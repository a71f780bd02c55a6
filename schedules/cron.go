package schedules

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones wherever the binary runs, with or without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"

	"github.com/gpuorch/orchestrator/engine"
)

// CronMax is the longest cron expression (schedules.cron).
const CronMax = 255

// parser reads 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first,
// and the descriptors: @yearly, @monthly, @weekly, @daily, @hourly, @every <duration>.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// allHours is the hour field of a schedule that fires in every hour.
const allHours = 1<<24 - 1

// Cron is a parsed schedule in its time zone: when its fires are.
//
// Daylight saving time follows robfig/cron's reading of wall clocks, with one change. A fire
// time that a spring-forward skips does not happen that day (a daily 02:30 in
// America/New_York does not fire on the day 02:00 jumps to 03:00). A wall-clock time that a
// fall-back repeats fires once, at its first occurrence, for a schedule that names its hours
// (a daily 01:30 fires at 01:30 EDT, not again at 01:30 EST); a schedule that fires every hour
// fires in each real hour, both 01:00s included. @every counts real time and knows no zone.
type Cron struct {
	sched cron.Schedule
	loc   *time.Location
	// fixedHours: the schedule names some hours only, so a repeated wall-clock time is a
	// second fire of the same one.
	fixedHours bool
}

// ParseTimezone reads an IANA zone name ("" is UTC). The errors name the field timezone.
func ParseTimezone(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, invalid("timezone", `"Local" depends on the host: name an IANA zone such as "Europe/Berlin" or "UTC"`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, invalid("timezone", "%q is not an IANA time zone (such as \"America/New_York\" or \"UTC\")", name)
	}
	return loc, nil
}

// ParseCron reads spec in the zone timezone. The errors are *engine.ValidationError naming the
// field (cron or timezone).
func ParseCron(spec, timezone string) (*Cron, error) {
	loc, err := ParseTimezone(timezone)
	if err != nil {
		return nil, err
	}
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "":
		return nil, invalid("cron", "is required: 5 fields (minute hour day month weekday), 6 with seconds first, "+
			"@every <duration>, @hourly, @daily, @weekly, @monthly or @yearly")
	case len(spec) > CronMax:
		return nil, invalid("cron", "is %d bytes, over the limit of %d", len(spec), CronMax)
	case strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ="):
		return nil, invalid("cron", "names a time zone: set the schedule's timezone instead")
	}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || every < time.Second || every%time.Second != 0 {
			return nil, invalid("cron", "@every takes a whole number of seconds, at least 1s (such as 30s, 5m or 1h30m), not %q", d)
		}
		return &Cron{sched: cron.Every(every), loc: loc}, nil
	}
	sched, err := parser.Parse(spec)
	if err != nil {
		return nil, invalid("cron", "%s", err.Error())
	}
	c := &Cron{sched: sched, loc: loc}
	if s, ok := sched.(*cron.SpecSchedule); ok {
		s.Location = loc
		c.fixedHours = s.Hour&allHours != allHours
	}
	return c, nil
}

// Location is the schedule's time zone.
func (c *Cron) Location() *time.Location { return c.loc }

// Next returns the first fire time after t, in UTC; the zero time when there is none within
// five years (robfig/cron's horizon: "0 0 30 2 *" never fires).
func (c *Cron) Next(t time.Time) time.Time {
	at := t.In(c.loc)
	for {
		n := c.sched.Next(at)
		if n.IsZero() || !c.fixedHours || !repeatedWallClock(n) {
			return n.UTC()
		}
		at = n // the second occurrence of a wall-clock time a fall-back repeated
	}
}

// NextRuns returns the first n fire times after t, in the schedule's zone.
func (c *Cron) NextRuns(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for range n {
		t = c.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t.In(c.loc))
	}
	return out
}

// repeatedWallClock reports whether the wall-clock time of t was shown once already, just
// before a fall-back moved the clocks back over it: t lies in the new zone period less than
// the amount the clocks went back after its start.
func repeatedWallClock(t time.Time) bool {
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, now := t.Zone()
	_, before := start.Add(-time.Nanosecond).Zone()
	return before > now && t.Sub(start) < time.Duration(before-now)*time.Second
}

// invalid is a 400 naming field.
func invalid(field, format string, args ...any) error {
	return &engine.ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}
