package schedules

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
)

func TestParseCron(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC) // a Monday
	for _, tc := range []struct {
		spec, tz string
		next     time.Time // the first fire after at, in UTC
	}{
		{"*/15 * * * *", "", at.Add(15 * time.Minute)},
		{"30 * * * * *", "UTC", at.Add(30 * time.Second)}, // six fields: seconds first
		{"@every 30s", "", at.Add(30 * time.Second)},
		{"@every 1h30m", "Asia/Tokyo", at.Add(90 * time.Minute)}, // @every counts real time
		{"@hourly", "", at.Add(time.Hour)},
		{"@daily", "", time.Date(2026, 5, 5, 0, 0, 0, 0, time.UTC)},
		{"@daily", "Europe/Berlin", time.Date(2026, 5, 4, 22, 0, 0, 0, time.UTC)}, // midnight CEST
		{"0 9 * * MON-FRI", "America/New_York", time.Date(2026, 5, 4, 13, 0, 0, 0, time.UTC)},
		{"  0 12 * * *  ", "", time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.spec+"/"+tc.tz, func(t *testing.T) {
			c, err := ParseCron(tc.spec, tc.tz)
			require.NoError(t, err)
			require.Equal(t, tc.next, c.Next(at))
			require.Equal(t, time.UTC, c.Next(at).Location())
		})
	}
}

func TestParseCronErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec, tz, field, says string
	}{
		{"", "", "cron", "is required"},
		{"* * *", "", "cron", "expected 5 to 6 fields"},
		{"61 * * * *", "", "cron", "above maximum"},
		{"* * * * * * *", "", "cron", "expected 5 to 6 fields"},
		{"@fortnightly", "", "cron", "unrecognized descriptor"},
		{"@every 1500ms", "", "cron", "whole number of seconds"},
		{"@every 0s", "", "cron", "at least 1s"},
		{"@every soon", "", "cron", "whole number"},
		{"TZ=Europe/Berlin 0 * * * *", "", "cron", "set the schedule's timezone"},
		{strings.Repeat("1", CronMax+1), "", "cron", "over the limit"},
		{"@hourly", "Mars/Olympus", "timezone", "not an IANA time zone"},
		{"@hourly", "Local", "timezone", "depends on the host"},
		{"@hourly", "utc+1", "timezone", "not an IANA time zone"},
	} {
		t.Run(tc.spec+"/"+tc.tz, func(t *testing.T) {
			_, err := ParseCron(tc.spec, tc.tz)
			var valErr *engine.ValidationError
			require.True(t, errors.As(err, &valErr), "error %v", err)
			require.Equal(t, tc.field, valErr.Field)
			require.Contains(t, valErr.Message, tc.says)
		})
	}
}

// TestCronDaylightSaving: in America/New_York the clocks jump from 02:00 to 03:00 on 2026-03-08
// and fall back from 02:00 to 01:00 on 2026-11-01; in Europe/Berlin from 02:00 to 03:00 on
// 2026-03-29 and from 03:00 to 02:00 on 2026-10-25.
func TestCronDaylightSaving(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	runs := func(spec, tz string, from time.Time, n int) []string {
		c, err := ParseCron(spec, tz)
		require.NoError(t, err)
		var out []string
		for _, r := range c.NextRuns(from, n) {
			out = append(out, r.Format(time.RFC3339))
		}
		return out
	}

	t.Run("SpringForwardSkipsTheMissingTime", func(t *testing.T) {
		// 02:30 does not exist on 2026-03-08: robfig/cron's reading, which this keeps, skips
		// that day's fire.
		require.Equal(t, []string{"2026-03-07T02:30:00-05:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"},
			runs("30 2 * * *", "America/New_York", time.Date(2026, 3, 6, 12, 0, 0, 0, ny), 3))
		require.Equal(t, []string{"2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00"},
			runs("30 2 * * *", "Europe/Berlin", time.Date(2026, 3, 27, 12, 0, 0, 0, berlin), 2))
	})
	t.Run("SpringForwardOtherTimesFireOnce", func(t *testing.T) {
		require.Equal(t, []string{"2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00"},
			runs("30 1,3 * * *", "America/New_York", time.Date(2026, 3, 8, 0, 0, 0, 0, ny), 2))
	})
	t.Run("FallBackFiresOnce", func(t *testing.T) {
		// 01:30 happens twice on 2026-11-01 (EDT, then EST): the schedule fires at the first.
		require.Equal(t, []string{"2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"},
			runs("30 1 * * *", "America/New_York", time.Date(2026, 10, 30, 12, 0, 0, 0, ny), 3))
		require.Equal(t, []string{"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"},
			runs("30 2 * * *", "Europe/Berlin", time.Date(2026, 10, 24, 12, 0, 0, 0, berlin), 2))
		// With seconds, and from the first occurrence itself.
		c, err := ParseCron("15 30 1 * * *", "America/New_York")
		require.NoError(t, err)
		first := time.Date(2026, 11, 1, 5, 30, 15, 0, time.UTC) // 01:30:15 EDT
		require.Equal(t, time.Date(2026, 11, 2, 6, 30, 15, 0, time.UTC), c.Next(first), "not again at 01:30:15 EST")
	})
	t.Run("FallBackEveryHourFiresInEachRealHour", func(t *testing.T) {
		// A schedule of every hour fires in both 01:00 hours: each is an hour of real time.
		require.Equal(t, []string{"2026-11-01T00:00:00-04:00", "2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00",
			"2026-11-01T02:00:00-05:00"}, runs("@hourly", "America/New_York", time.Date(2026, 10, 31, 23, 30, 0, 0, ny), 4))
	})
	t.Run("EveryCountsRealTime", func(t *testing.T) {
		require.Equal(t, []string{"2026-11-01T01:40:00-04:00", "2026-11-01T01:10:00-05:00"},
			runs("@every 30m", "America/New_York", time.Date(2026, 11, 1, 1, 10, 0, 0, ny), 2))
	})
}

func TestCronNeverFires(t *testing.T) {
	t.Parallel()
	c, err := ParseCron("0 0 30 2 *", "")
	require.NoError(t, err)
	require.True(t, c.Next(time.Now()).IsZero(), "February 30th never comes")
	require.Empty(t, c.NextRuns(time.Now(), 5))
}

func TestJobID(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	require.Equal(t, "sch-nightly-1777888800", JobID("nightly", at))
	require.Equal(t, "sch-nightly-t1777888800000001", JobID("nightly", at.Add(time.Microsecond)))
	long := strings.Repeat("x", IDPattern.Max)
	require.True(t, engine.JobIDPattern.MatchString(JobID(long, at.Add(time.Microsecond))), "the longest id makes a valid job id")
}
