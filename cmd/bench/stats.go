package main

import (
	"math"
	"slices"
	"time"
)

// Percentiles summarises a set of durations in milliseconds. Quantiles use the nearest-rank
// method (the smallest sample with at least q of the samples at or below it), so every figure is
// a latency that was actually observed.
type Percentiles struct {
	// Count is the number of samples.
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

// summarize computes the percentiles of ds. It sorts a copy; ds is left as is. An empty input
// gives the zero Percentiles.
func summarize(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum float64
	for _, d := range s {
		sum += float64(d)
	}
	return Percentiles{
		Count: len(s),
		P50:   ms(quantile(s, 0.50)),
		P90:   ms(quantile(s, 0.90)),
		P99:   ms(quantile(s, 0.99)),
		Max:   ms(s[len(s)-1]),
		Mean:  round3(sum / float64(len(s)) / float64(time.Millisecond)),
	}
}

// quantile returns the nearest-rank q-quantile (0 < q <= 1) of sorted, which must not be empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// ms converts d to milliseconds rounded to the microsecond.
func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

// round3 rounds to three decimals, which keeps the JSON readable.
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// perSec returns n/d in events per second, 0 when d is not positive.
func perSec(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return math.Round(float64(n)/d.Seconds()*10) / 10
}

// seconds returns d in seconds rounded to the millisecond.
func seconds(d time.Duration) float64 { return round3(d.Seconds()) }

// pacer spaces events evenly at a fixed rate from a start time: event i is due at
// start + i/rate. An open-loop load generator asks it which events are due and sends them
// without waiting for earlier answers, so a slow server cannot slow the offered load down
// (no coordinated omission).
type pacer struct {
	start    time.Time
	interval float64 // nanoseconds between events
	total    int
}

// newPacer returns a pacer of total events at rate events per second from start. A rate that
// is not positive makes every event due at start.
func newPacer(start time.Time, rate float64, total int) pacer {
	p := pacer{start: start, total: total}
	if rate > 0 {
		p.interval = float64(time.Second) / rate
	}
	return p
}

// pacerTotal is the number of events a run at rate per second for d produces (at least 1).
func pacerTotal(rate float64, d time.Duration) int {
	return max(1, int(math.Round(rate*d.Seconds())))
}

// at returns when event i is due.
func (p pacer) at(i int) time.Time {
	return p.start.Add(time.Duration(math.Ceil(float64(i) * p.interval)))
}

// due returns how many events are due at now: events 0 .. due-1 are scheduled at or before now.
// It never exceeds total.
func (p pacer) due(now time.Time) int {
	if now.Before(p.start) {
		return 0
	}
	if p.interval == 0 {
		return p.total
	}
	// Estimate with floating point, then settle against at so that the two always agree.
	n := min(int(float64(now.Sub(p.start))/p.interval)+1, p.total)
	for n < p.total && !p.at(n).After(now) {
		n++
	}
	for n > 0 && p.at(n-1).After(now) {
		n--
	}
	return n
}
