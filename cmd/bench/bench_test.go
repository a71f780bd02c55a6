package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSummarize(t *testing.T) {
	t.Parallel()

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, Percentiles{}, summarize(nil))
	})

	t.Run("OneToHundred", func(t *testing.T) {
		t.Parallel()
		// 100 samples of 1..100ms in reverse order: the nearest rank of q is q*100.
		ds := make([]time.Duration, 100)
		for i := range ds {
			ds[i] = time.Duration(100-i) * time.Millisecond
		}
		p := summarize(ds)
		require.Equal(t, Percentiles{Count: 100, P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}, p)
		require.Equal(t, 100*time.Millisecond, ds[0], "summarize must not reorder its input")
	})

	t.Run("SmallSets", func(t *testing.T) {
		t.Parallel()
		one := summarize([]time.Duration{1500 * time.Microsecond})
		require.Equal(t, Percentiles{Count: 1, P50: 1.5, P90: 1.5, P99: 1.5, Max: 1.5, Mean: 1.5}, one)
		// Ten samples: p90 is the 9th, p99 rounds up to the 10th, never past the end.
		ten := make([]time.Duration, 10)
		for i := range ten {
			ten[i] = time.Duration(i+1) * time.Millisecond
		}
		p := summarize(ten)
		require.Equal(t, 5.0, p.P50)
		require.Equal(t, 9.0, p.P90)
		require.Equal(t, 10.0, p.P99)
	})
}

func TestQuantileBounds(t *testing.T) {
	t.Parallel()
	s := []time.Duration{1, 2, 3}
	require.Equal(t, time.Duration(1), quantile(s, 0), "q=0 gives the smallest sample")
	require.Equal(t, time.Duration(3), quantile(s, 1))
}

func TestPacer(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	t.Run("Schedule", func(t *testing.T) {
		t.Parallel()
		p := newPacer(start, 1000, 5000)
		require.Equal(t, start, p.at(0))
		require.Equal(t, start.Add(time.Millisecond), p.at(1))
		require.Equal(t, start.Add(4999*time.Millisecond), p.at(4999))
	})

	t.Run("Due", func(t *testing.T) {
		t.Parallel()
		p := newPacer(start, 1000, 5000)
		require.Equal(t, 0, p.due(start.Add(-time.Nanosecond)), "nothing before the start")
		require.Equal(t, 1, p.due(start), "event 0 is due at the start")
		require.Equal(t, 1, p.due(start.Add(999*time.Microsecond)))
		require.Equal(t, 2, p.due(start.Add(time.Millisecond)))
		require.Equal(t, 1000, p.due(start.Add(999*time.Millisecond)))
		require.Equal(t, 5000, p.due(start.Add(time.Hour)), "never more than the total")
	})

	t.Run("DueMatchesAt", func(t *testing.T) {
		t.Parallel()
		// For every event, it is due exactly from its scheduled time on (an odd rate makes the
		// interval fractional).
		p := newPacer(start, 333, 1000)
		for i := range 1000 {
			at := p.at(i)
			require.GreaterOrEqual(t, p.due(at), i+1, "event %d at its time", i)
			require.LessOrEqual(t, p.due(at.Add(-time.Nanosecond)), i, "event %d before its time", i)
		}
	})

	t.Run("Total", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 10000, pacerTotal(1000, 10*time.Second))
		require.Equal(t, 5, pacerTotal(2.5, 2*time.Second))
		require.Equal(t, 1, pacerTotal(0.1, time.Second), "at least one event")
	})

	t.Run("NoRate", func(t *testing.T) {
		t.Parallel()
		p := newPacer(start, 0, 7)
		require.Equal(t, 7, p.due(start), "without a rate everything is due at once")
	})
}

func TestRates(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2000.0, perSec(20000, 10*time.Second))
	require.Equal(t, 0.0, perSec(5, 0))
	require.Equal(t, 1.235, seconds(1234567*time.Microsecond))
}

func TestLikePrefix(t *testing.T) {
	t.Parallel()
	require.Equal(t, `babc-burndown-%`, likePrefix("babc-burndown-"))
	require.Equal(t, `a\_b\%c\\%`, likePrefix(`a_b%c\`))
}

func TestBenchPayload(t *testing.T) {
	t.Parallel()
	require.JSONEq(t, `{}`, string(benchPayload(0)))
	for _, n := range []int{minPayloadBytes, 100, 256 << 10, maxPayloadBytes} {
		p := benchPayload(n)
		require.Len(t, p, n)
		require.True(t, json.Valid(p), "%d bytes", n)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		o, _, err := parseFlags(nil)
		require.NoError(t, err)
		require.Equal(t, scenarioNames, o.scenarios)
		require.Equal(t, 20000, o.n)
		require.Equal(t, 16, o.producers)
		require.Equal(t, 2, o.workers)
		require.Equal(t, 50, o.concurrency)
		require.Equal(t, 5*time.Minute, o.timeout)
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"-scenarios", "nope"},
			{"-n", "0"},
			{"-pprof", "latency", "-scenarios", "burndown"},
			{"-api-url", "http://x"},
			{"-no-workers"},
			{"-payload-bytes", "9"},
			{"-payload-bytes", "1048577"},
			{"-payload-bytes", "1024", "-scenarios", "streaming,backlog"},
			{"-embedded", "-api-url", "http://x", "-token", "t"},
			{"-embedded", "-scenarios", "latency,backlog"},
		} {
			_, _, err := parseFlags(args)
			require.Error(t, err, "%v", args)
		}
	})

	t.Run("Embedded", func(t *testing.T) {
		t.Parallel()
		o, _, err := parseFlags([]string{"-embedded", "-scenarios", "burndown,leases"})
		require.NoError(t, err)
		require.True(t, o.embedded)
	})

	t.Run("SecretsRedacted", func(t *testing.T) {
		t.Parallel()
		_, fs, err := parseFlags([]string{"-api-url", "http://x", "-token", "secret", "-mysql-dsn", "u:pw@tcp(h:3306)/orchestrator"})
		require.NoError(t, err)
		v := flagValues(fs)
		require.Equal(t, "<redacted>", v["token"])
		require.NotContains(t, v["mysql-dsn"], "pw@")
		require.Equal(t, 20000, v["n"])
	})
}
