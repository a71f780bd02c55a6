package main

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSample(t *testing.T) {
	t.Parallel()

	t.Run("Forms", func(t *testing.T) {
		t.Parallel()
		s, ok := parseSample(`process_resident_memory_bytes 4.6391296e+07`)
		require.True(t, ok)
		require.Equal(t, sample{name: "process_resident_memory_bytes", value: 46391296}, s)

		s, ok = parseSample(`gpu_orchestrator_http_request_duration_seconds_bucket{route="/leases/:token/release",le="+Inf"} 150 1700000000000`)
		require.True(t, ok)
		require.Equal(t, "gpu_orchestrator_http_request_duration_seconds_bucket", s.name)
		require.Equal(t, map[string]string{"route": "/leases/:token/release", "le": "+Inf"}, s.labels)
		require.Equal(t, 150.0, s.value)

		s, ok = parseSample(`x{a="q\"uo,te}",b="back\\slash",c="new\nline",} 1`)
		require.True(t, ok, "escapes, a brace and a comma inside a value, a trailing comma")
		require.Equal(t, map[string]string{"a": `q"uo,te}`, "b": `back\slash`, "c": "new\nline"}, s.labels)

		s, ok = parseSample(`x{} NaN`)
		require.True(t, ok)
		require.True(t, math.IsNaN(s.value))
		require.Empty(t, s.labels)
	})

	t.Run("Rejected", func(t *testing.T) {
		t.Parallel()
		for _, line := range []string{
			"", "   ", "# HELP x Something.", "# TYPE x counter", "x", "x{a=\"1\"}", `x{a="1" 2`, `x{a=1} 2`, "x abc", "{a=\"1\"} 2",
		} {
			_, ok := parseSample(line)
			require.False(t, ok, "%q", line)
		}
	})
}

// submitHistogram is a /jobs/submit request-duration histogram as the orchestrator shows it
// (DefBuckets cut short), with a series of another route that must be ignored.
const submitHistogram = `# HELP gpu_orchestrator_http_request_duration_seconds Time to answer an HTTP request.
# TYPE gpu_orchestrator_http_request_duration_seconds histogram
gpu_orchestrator_http_request_duration_seconds_bucket{route="/jobs/submit",le="0.005"} %d
gpu_orchestrator_http_request_duration_seconds_bucket{route="/jobs/submit",le="0.01"} %d
gpu_orchestrator_http_request_duration_seconds_bucket{route="/jobs/submit",le="0.025"} %d
gpu_orchestrator_http_request_duration_seconds_bucket{route="/jobs/submit",le="+Inf"} %d
gpu_orchestrator_http_request_duration_seconds_sum{route="/jobs/submit"} %g
gpu_orchestrator_http_request_duration_seconds_count{route="/jobs/submit"} %d
gpu_orchestrator_http_request_duration_seconds_bucket{route="/jobs",le="+Inf"} 99
gpu_orchestrator_http_request_duration_seconds_count{route="/jobs"} 99
gpu_orchestrator_admission_decisions_total{agent="*",decision="admitted",reason="ok"} %d
gpu_orchestrator_admission_decisions_total{agent="bench",decision="admitted",reason="ok"} %d
gpu_orchestrator_admission_decisions_total{agent="*",decision="rejected",reason="rate_limited"} 0
go_goroutines 42
`

func exposition(t *testing.T, b5, b10, b25, inf int, sum float64, okStar, okBench int) []sample {
	t.Helper()
	text := fmt.Sprintf(submitHistogram, b5, b10, b25, inf, sum, inf, okStar, okBench)
	s, err := parseSamples(strings.NewReader(text), metricHTTPDuration, metricDecisions)
	require.NoError(t, err)
	return s
}

func TestHistogram(t *testing.T) {
	t.Parallel()

	t.Run("Collect", func(t *testing.T) {
		t.Parallel()
		h := routeHistogram(exposition(t, 10, 30, 40, 40, 0.3, 0, 0), "/jobs/submit")
		require.Equal(t, []bucket{{0.005, 10}, {0.01, 30}, {0.025, 40}, {math.Inf(1), 40}}, h.buckets)
		require.Equal(t, 40.0, h.count)
		require.Equal(t, 0.3, h.sum)
		require.Empty(t, routeHistogram(exposition(t, 1, 1, 1, 1, 1, 0, 0), "/nope").buckets)
	})

	t.Run("Quantile", func(t *testing.T) {
		t.Parallel()
		h := histogram{buckets: []bucket{{0.005, 10}, {0.01, 30}, {0.025, 40}, {math.Inf(1), 40}}, count: 40}
		require.InDelta(t, 0.0075, h.quantile(0.5), 1e-12, "rank 20: halfway through the 5–10 ms bucket")
		require.InDelta(t, 0.005, h.quantile(0.25), 1e-12, "rank 10: the top of the first bucket")
		require.InDelta(t, 0.0025, h.quantile(0.125), 1e-12, "the first bucket starts at 0")
		require.InDelta(t, 0.025, h.quantile(1), 1e-12)
		require.InDelta(t, 0.0244, h.quantile(0.99), 1e-12, "rank 39.6: 9.6 of the 10 in 10–25 ms")
	})

	t.Run("QuantileInInf", func(t *testing.T) {
		t.Parallel()
		// Most observations above the last finite bound: the estimate cannot pass it.
		h := histogram{buckets: []bucket{{0.005, 1}, {0.01, 2}, {math.Inf(1), 10}}, count: 10}
		require.Equal(t, 0.01, h.quantile(0.5))
		require.Equal(t, 0.005, h.quantile(0.1))
	})

	t.Run("QuantileUndefined", func(t *testing.T) {
		t.Parallel()
		for name, h := range map[string]histogram{
			"Empty":   {},
			"NoCount": {buckets: []bucket{{0.005, 0}, {math.Inf(1), 0}}},
			"NoInf":   {buckets: []bucket{{0.005, 3}, {0.01, 4}}, count: 4},
			"InfOnly": {buckets: []bucket{{math.Inf(1), 4}}, count: 4},
		} {
			require.True(t, math.IsNaN(h.quantile(0.5)), name)
		}
		h := histogram{buckets: []bucket{{0.005, 1}, {math.Inf(1), 1}}, count: 1}
		require.True(t, math.IsNaN(h.quantile(0)))
		require.True(t, math.IsNaN(h.quantile(1.5)))
	})

	t.Run("Delta", func(t *testing.T) {
		t.Parallel()
		before := routeHistogram(exposition(t, 100, 150, 160, 160, 1.0, 0, 0), "/jobs/submit")
		after := routeHistogram(exposition(t, 110, 180, 200, 200, 1.5, 0, 0), "/jobs/submit")
		d := after.sub(before)
		require.Equal(t, []bucket{{0.005, 10}, {0.01, 30}, {0.025, 40}, {math.Inf(1), 40}}, d.buckets)
		require.Equal(t, 40.0, d.count)
		require.InDelta(t, 0.5, d.sum, 1e-12)
		require.InDelta(t, 0.0075, d.quantile(0.5), 1e-12)

		require.Equal(t, before, before.sub(after), "a counter that went down (a restart) is taken as is")
		require.Equal(t, d.buckets, after.sub(histogram{}).sub(before).buckets, "a missing series counts from 0")
	})

	t.Run("Add", func(t *testing.T) {
		t.Parallel()
		a := histogram{buckets: []bucket{{0.005, 1}, {math.Inf(1), 2}}, sum: 0.01, count: 2}
		b := histogram{buckets: []bucket{{0.005, 3}, {math.Inf(1), 3}}, sum: 0.006, count: 3}
		require.Equal(t, a, histogram{}.add(a))
		s := a.add(b)
		require.Equal(t, []bucket{{0.005, 4}, {math.Inf(1), 5}}, s.buckets)
		require.Equal(t, 5.0, s.count)
		require.InDelta(t, 0.016, s.sum, 1e-12)
	})

	t.Run("RouteLatencies", func(t *testing.T) {
		t.Parallel()
		before := exposition(t, 100, 150, 160, 160, 1.0, 0, 0)
		after := exposition(t, 110, 180, 200, 200, 1.3, 0, 0)
		got := routeLatencies(before, after, map[string]string{"submit": "/jobs/submit", "claim": "/internal/jobs/claim"})
		require.Equal(t, map[string]*ServerLatency{"submit": {Count: 40, Mean: 7.5, P50: 7.5, P90: 19, P99: 24.4}}, got,
			"the requests between the scrapes only; a route without any is left out")
		require.Empty(t, routeLatencies(after, after, map[string]string{"submit": "/jobs/submit"}))
	})

	t.Run("ServerLatency", func(t *testing.T) {
		t.Parallel()
		require.Nil(t, serverLatency(histogram{}))
		h := histogram{buckets: []bucket{{0.005, 10}, {0.01, 30}, {0.025, 40}, {math.Inf(1), 40}}, sum: 0.3, count: 40}
		require.Equal(t, &ServerLatency{Count: 40, Mean: 7.5, P50: 7.5, P90: 19, P99: 24.4}, serverLatency(h))
	})
}

func TestDecisionCounts(t *testing.T) {
	t.Parallel()
	before := decisionCounts(exposition(t, 0, 0, 0, 0, 0, 5, 0))
	require.Equal(t, map[string]float64{"admitted_ok": 5, "rejected_rate_limited": 0}, before, "every agent label added up")
	after := decisionCounts(exposition(t, 0, 0, 0, 0, 0, 7, 30))
	require.Equal(t, map[string]int{"admitted_ok": 32}, countDeltas(before, after))
	require.Nil(t, countDeltas(after, after), "nothing grew")
}
