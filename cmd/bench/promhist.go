package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The orchestrator's series the leases and admission scenarios read from GET /metrics: the
// server-side time of every request by route template (prometheus.DefBuckets: 5, 10, 25, 50,
// 100, 250, 500 ms, 1, 2.5, 5, 10 s) and the admission decisions by agent, decision and reason.
// The orchestrator has no histogram of the admission decision itself.
const (
	metricHTTPDuration = "gpu_orchestrator_http_request_duration_seconds"
	metricDecisions    = "gpu_orchestrator_admission_decisions_total"
)

// sample is one line of a Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseSample parses a sample line: `name value`, `name{k="v",…} value`, either with a
// timestamp after the value. Comments, blank and malformed lines give false.
func parseSample(line string) (sample, bool) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return sample{}, false
	}
	end := strings.IndexAny(line, "{ \t")
	if end <= 0 {
		return sample{}, false
	}
	s := sample{name: line[:end]}
	rest := line[end:]
	if rest[0] == '{' {
		labels, after, ok := parseLabels(rest[1:])
		if !ok {
			return sample{}, false
		}
		s.labels, rest = labels, after
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return sample{}, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return sample{}, false
	}
	s.value = v
	return s, true
}

// parseLabels parses `k="v",k2="v2"}` (the text after the opening brace) and returns the
// labels and the text after the closing brace. Values may hold escaped \\, \" and \n.
func parseLabels(s string) (map[string]string, string, bool) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if s == "" {
			return nil, "", false
		}
		if s[0] == '}' {
			return labels, s[1:], true
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, "", false
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				if s[i] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, "", false
		}
		labels[key] = val.String()
		s = s[i+1:]
	}
}

// parseSamples returns the samples of r whose name starts with one of prefixes (a histogram's
// name covers its _bucket, _sum and _count series).
func parseSamples(r io.Reader, prefixes ...string) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		s, ok := parseSample(sc.Text())
		if !ok || !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s.name, p) }) {
			continue
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// scrapeSamples reads the samples of GET <apiURL>/metrics whose names start with prefixes.
func scrapeSamples(ctx context.Context, hc *http.Client, apiURL string, prefixes ...string) ([]sample, error) {
	return fetchMetrics(ctx, hc, apiURL, func(r io.Reader) ([]sample, error) { return parseSamples(r, prefixes...) })
}

// matches reports whether s has every label of want.
func (s sample) matches(want map[string]string) bool {
	for k, v := range want {
		if s.labels[k] != v {
			return false
		}
	}
	return true
}

// bucket is one cumulative bucket of a Prometheus histogram: how many observations were at
// most le.
type bucket struct {
	le    float64
	count float64
}

// histogram is one series of a Prometheus histogram: its cumulative buckets by increasing
// bound (the last is +Inf), and the sum and count of the observations.
type histogram struct {
	buckets []bucket
	sum     float64
	count   float64
}

// histogramOf collects the series of histogram name whose labels include want (le aside).
// The buckets of several series that match are added up.
func histogramOf(samples []sample, name string, want map[string]string) histogram {
	var h histogram
	byLE := map[float64]float64{}
	for _, s := range samples {
		if !s.matches(want) {
			continue
		}
		switch s.name {
		case name + "_bucket":
			le, err := strconv.ParseFloat(s.labels["le"], 64)
			if err == nil {
				byLE[le] += s.value
			}
		case name + "_sum":
			h.sum += s.value
		case name + "_count":
			h.count += s.value
		}
	}
	for le, n := range byLE {
		h.buckets = append(h.buckets, bucket{le: le, count: n})
	}
	slices.SortFunc(h.buckets, func(a, b bucket) int { return cmpFloat(a.le, b.le) })
	return h
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sub returns h − prev: the observations between two scrapes of the same series. A bucket
// missing from prev counts from 0; a counter that went down (the process restarted) leaves
// h as it is.
func (h histogram) sub(prev histogram) histogram {
	if h.count < prev.count {
		return h
	}
	before := make(map[float64]float64, len(prev.buckets))
	for _, b := range prev.buckets {
		before[b.le] = b.count
	}
	out := histogram{sum: h.sum - prev.sum, count: h.count - prev.count, buckets: make([]bucket, len(h.buckets))}
	for i, b := range h.buckets {
		out.buckets[i] = bucket{le: b.le, count: b.count - before[b.le]}
	}
	return out
}

// add returns h + o (the same series over two windows).
func (h histogram) add(o histogram) histogram {
	if len(h.buckets) == 0 {
		return o
	}
	more := make(map[float64]float64, len(o.buckets))
	for _, b := range o.buckets {
		more[b.le] = b.count
	}
	out := histogram{sum: h.sum + o.sum, count: h.count + o.count, buckets: make([]bucket, len(h.buckets))}
	for i, b := range h.buckets {
		out.buckets[i] = bucket{le: b.le, count: b.count + more[b.le]}
	}
	return out
}

// quantile estimates the q-quantile (0 < q ≤ 1) of the observations the way Prometheus'
// histogram_quantile does: find the bucket that holds the rank q·count and interpolate
// linearly between its lower and upper bound (the first bucket starts at 0). A rank in the
// +Inf bucket gives the highest finite bound: the estimate cannot say more. NaN when the
// histogram is empty or has no +Inf bucket.
func (h histogram) quantile(q float64) float64 {
	n := len(h.buckets)
	if n == 0 || !math.IsInf(h.buckets[n-1].le, 1) || h.buckets[n-1].count <= 0 || q <= 0 || q > 1 {
		return math.NaN()
	}
	rank := q * h.buckets[n-1].count
	i, _ := slices.BinarySearchFunc(h.buckets, rank, func(b bucket, r float64) int { return cmpFloat(b.count, r) })
	if i == n-1 {
		if n == 1 {
			return math.NaN()
		}
		return h.buckets[n-2].le
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.buckets[i-1].le, h.buckets[i-1].count
	}
	upper, in := h.buckets[i].le, h.buckets[i].count-below
	if in <= 0 {
		return upper
	}
	return lower + (upper-lower)*(rank-below)/in
}

// ServerLatency is a latency as the orchestrator measured it: the difference of one series of
// its gpu_orchestrator_http_request_duration_seconds histogram between two scrapes, in
// milliseconds. Mean is exact (Δsum / Δcount); the quantiles are estimates, interpolated
// linearly within the buckets (0–5, 5–10, 10–25, 25–50 ms, …): they place a latency within its
// bucket, no closer (a p50 of 2.5 ms says "under 5 ms").
type ServerLatency struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
}

// serverLatency summarises a histogram of seconds; nil when it holds no observation.
func serverLatency(h histogram) *ServerLatency {
	if h.count <= 0 {
		return nil
	}
	msOf := func(sec float64) float64 {
		if math.IsNaN(sec) {
			return 0
		}
		return round3(sec * 1000)
	}
	return &ServerLatency{
		Count: int(math.Round(h.count)),
		Mean:  msOf(h.sum / h.count),
		P50:   msOf(h.quantile(0.50)),
		P90:   msOf(h.quantile(0.90)),
		P99:   msOf(h.quantile(0.99)),
	}
}

// routeLatencies is the orchestrator's own time of each route of routes (name → route template)
// between two scrapes; a route without requests between them is left out.
func routeLatencies(before, after []sample, routes map[string]string) map[string]*ServerLatency {
	out := map[string]*ServerLatency{}
	for name, route := range routes {
		if s := serverLatency(routeHistogram(after, route).sub(routeHistogram(before, route))); s != nil {
			out[name] = s
		}
	}
	return out
}

// routeHistogram is the request-duration histogram of one route template ("/jobs/submit").
func routeHistogram(samples []sample, route string) histogram {
	return histogramOf(samples, metricHTTPDuration, map[string]string{"route": route})
}

// decisionCounts returns gpu_orchestrator_admission_decisions_total by "<decision>_<reason>",
// every agent label added up.
func decisionCounts(samples []sample) map[string]float64 {
	out := map[string]float64{}
	for _, s := range samples {
		if s.name == metricDecisions {
			out[s.labels["decision"]+"_"+s.labels["reason"]] += s.value
		}
	}
	return out
}

// countDeltas returns after − before of every key that grew, as integers (nil when none did).
func countDeltas(before, after map[string]float64) map[string]int {
	var out map[string]int
	for k, v := range after {
		if d := int(math.Round(v - before[k])); d > 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[k] = d
		}
	}
	return out
}
