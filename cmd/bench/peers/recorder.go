package main

import (
	"slices"
	"sync/atomic"
	"time"
)

// recorder counts handler runs. Every handler of a scenario calls record, which
// takes a slot in preallocated slices, so the hot path allocates nothing and
// takes no lock.
type recorder struct {
	expected int64
	n        atomic.Int64 // slots taken
	written  atomic.Int64 // slots filled
	starts   []int64      // handler start, UnixNano
	ends     []int64      // handler end, UnixNano
	lat      []int64      // handler start - insert, ns
	done     chan struct{}
}

func newRecorder(expected int) *recorder {
	return &recorder{
		expected: int64(expected),
		starts:   make([]int64, expected),
		ends:     make([]int64, expected),
		lat:      make([]int64, expected),
		done:     make(chan struct{}),
	}
}

// current is the recorder of the running scenario; the handlers of every system
// report to it.
var current atomic.Pointer[recorder]

// handle is what a no-op handler does: note its start, the wait since the
// insert, and its end.
func handle(insertNs int64) {
	start := time.Now().UnixNano()
	r := current.Load()
	if r == nil {
		return
	}
	i := r.n.Add(1) - 1
	if i >= r.expected { // a redelivery or a job of another scenario
		return
	}
	r.starts[i] = start
	r.lat[i] = start - insertNs
	r.ends[i] = time.Now().UnixNano()
	if r.written.Add(1) == r.expected {
		close(r.done)
	}
}

// count is how many slots were filled. After a timeout a slot may be taken
// but not yet filled; count is then a lower bound, and the slices are read
// only up to the slots taken before it (close enough for a report).
func (r *recorder) count() int { return int(r.written.Load()) }

// wait blocks until every expected job ran or the timeout passed; it reports
// whether all ran.
func (r *recorder) wait(timeout time.Duration) bool {
	select {
	case <-r.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// window is the first handler start and the last handler end of the jobs seen.
func (r *recorder) window() (first, last int64) {
	c := r.count()
	if c == 0 {
		return 0, 0
	}
	first, last = r.starts[0], r.ends[0]
	for i := 1; i < c; i++ {
		first = min(first, r.starts[i])
		last = max(last, r.ends[i])
	}
	return first, last
}

// lastEnd is the last handler end.
func (r *recorder) lastEnd() int64 {
	_, last := r.window()
	return last
}

// Percentiles in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

func percentilesMs(ns []int64) *Percentiles {
	if len(ns) == 0 {
		return nil
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	at := func(q float64) float64 {
		i := int(q*float64(len(s))+0.5) - 1
		i = max(0, min(i, len(s)-1))
		return ms(s[i])
	}
	return &Percentiles{
		Count: len(s),
		Mean:  round3(sum / float64(len(s)) / 1e6),
		P50:   at(0.50),
		P90:   at(0.90),
		P99:   at(0.99),
		Max:   ms(s[len(s)-1]),
	}
}

func ms(ns int64) float64 { return round3(float64(ns) / 1e6) }

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
