package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
)

// benchAgent is the agent name of every job the bench submits.
const benchAgent = "bench"

// The bounds of -payload-bytes: the smallest object benchPayload makes, and the orchestrator's
// default max_payload_bytes.
const (
	minPayloadBytes = len(`{"pad":""}`)
	maxPayloadBytes = config.MaxPayloadBytesDefault
)

// benchPayload is the payload of every job, which the noop handler does not look at: {} when
// n is 0, else {"pad":"xx…"} of exactly n bytes, to measure what a payload's size costs.
func benchPayload(n int) json.RawMessage {
	if n == 0 {
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(`{"pad":"` + strings.Repeat("x", n-minPayloadBytes) + `"}`)
}

// newHTTPClient returns the bench's HTTP client: one transport whose idle pool keeps a
// connection per concurrent sender, so a submit never pays for a new TCP connection.
func newHTTPClient(idlePerHost int) *http.Client {
	return &http.Client{
		Timeout: client.TimeoutDefault,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        idlePerHost,
			MaxIdleConnsPerHost: idlePerHost,
			IdleConnTimeout:     90 * time.Second,
		},
	}
}

// newClient returns an API client over hc.
func newClient(url, token string, hc *http.Client) *client.Client {
	return client.New(url, token, client.WithHTTPClient(hc), client.WithUserAgent("gpuorch-bench/1"))
}

// idSpace names the jobs of one scenario: prefix + a zero-padded index. A fresh prefix per
// scenario and run keeps scenarios apart in the database (job_id LIKE prefix%).
type idSpace struct{ prefix string }

// id returns the job id of index i.
func (s idSpace) id(i int) string { return fmt.Sprintf("%s%07d", s.prefix, i) }

// loadStats is what one submit phase measured. Per-job slices are indexed by the job's index
// and written by the one goroutine that submitted it.
type loadStats struct {
	accepted atomic.Int64
	failed   atomic.Int64
	mu       sync.Mutex
	errs     map[string]int // failed submits by error code
	firstErr error
	// lat is the HTTP latency of each accepted submit (0: not sent or failed).
	lat []time.Duration
	// lag is how late each open-loop submit was sent after its scheduled time.
	lag   []time.Duration
	start time.Time // first request
	end   time.Time // last answer
}

func newLoadStats(n int, openLoop bool) *loadStats {
	ls := &loadStats{errs: map[string]int{}, lat: make([]time.Duration, n)}
	if openLoop {
		ls.lag = make([]time.Duration, n)
	}
	return ls
}

// sent returns how many submits have been answered so far.
func (ls *loadStats) sent() int64 { return ls.accepted.Load() + ls.failed.Load() }

// fail counts a failed submit under its error code; the first error is kept for the log.
func (ls *loadStats) fail(err error) { ls.failN(errorCode(err), 1, err) }

// failN counts n failed submits under code; the first error is kept for the log.
func (ls *loadStats) failN(code string, n int, err error) {
	ls.failed.Add(int64(n))
	ls.mu.Lock()
	ls.errs[code] += n
	if ls.firstErr == nil {
		ls.firstErr = err
	}
	ls.mu.Unlock()
}

// errorCode names a failed request in the report: "<status>_<code>" of an API error,
// "cancelled" or "transport".
func errorCode(err error) string {
	var apiErr *client.APIError
	switch {
	case errors.As(err, &apiErr):
		return fmt.Sprintf("%d_%s", apiErr.StatusCode, apiErr.Code)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return "transport"
}

// errorCounts returns the failed submits by code, nil when there were none.
func (ls *loadStats) errorCounts() map[string]int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.errs) == 0 {
		return nil
	}
	out := make(map[string]int, len(ls.errs))
	for k, v := range ls.errs {
		out[k] = v
	}
	return out
}

// nonZero returns the recorded (non-zero) durations of ds.
func nonZero(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(ds))
	for _, d := range ds {
		if d > 0 {
			out = append(out, d)
		}
	}
	return out
}

// submitter sends the bench's submits.
type submitter struct {
	api     *client.Client
	jobType string
	payload json.RawMessage // benchPayload
}

// submit sends job i and records its outcome in ls.
func (s submitter) submit(ctx context.Context, ls *loadStats, i int, id string) {
	t0 := time.Now()
	_, err := s.api.Submit(ctx, client.SubmitRequest{JobID: id, Type: s.jobType, Agent: benchAgent, Payload: s.payload})
	if err != nil {
		ls.fail(err)
		return
	}
	ls.lat[i] = max(time.Since(t0), time.Nanosecond)
	ls.accepted.Add(1)
}

// closedLoop submits n jobs with producers goroutines, each sending its next job as soon as the
// previous one was answered, recording into ls (of n jobs). It stops early when ctx ends.
func (s submitter) closedLoop(ctx context.Context, ls *loadStats, ids idSpace, n, producers int) {
	s.closedLoopUntil(ctx, ls, ids, n, producers, time.Time{})
}

// closedLoopUntil is closedLoop that also stops sending at until (unless zero): a submit sent
// before until is still answered and counted, so ls.end is the last answer, a little past until.
func (s submitter) closedLoopUntil(ctx context.Context, ls *loadStats, ids idSpace, n, producers int, until time.Time) {
	var next atomic.Int64
	var wg sync.WaitGroup
	ls.start = time.Now()
	for range producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if !until.IsZero() && !time.Now().Before(until) {
					return
				}
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				s.submit(ctx, ls, i, ids.id(i))
			}
		})
	}
	wg.Wait()
	ls.end = time.Now()
}

// openLoop offers rate submits per second, as many as ls has room for (an open-loop ls of
// pacerTotal(rate, duration) jobs): each submit is sent at its scheduled time on its own
// goroutine, whether or not earlier ones were answered. At most maxInflight are outstanding;
// beyond that the scheduler waits, and the delay shows in the send lag. It stops early when ctx
// ends.
func (s submitter) openLoop(ctx context.Context, ls *loadStats, ids idSpace, rate float64, maxInflight int) {
	ls.start, ls.end = paced(ctx, len(ls.lat), rate, maxInflight, ls.lag, func(i int) {
		s.submit(ctx, ls, i, ids.id(i))
	})
}

// paced calls send(i) for i in [0, total) at rate per second (open loop): each call runs on its
// own goroutine from its scheduled time on, whether or not earlier ones have returned, with at
// most maxInflight running; beyond that the scheduler waits. lag[i] records how late call i
// started after its scheduled time. It stops scheduling when ctx ends, waits for the calls
// under way, and returns the schedule's start and the time the last call returned.
func paced(ctx context.Context, total int, rate float64, maxInflight int, lag []time.Duration, send func(i int)) (start, end time.Time) {
	sem := make(chan struct{}, maxInflight)
	var wg sync.WaitGroup
	p := newPacer(time.Now(), rate, total)
	timer := time.NewTimer(0)
	defer timer.Stop()
	sent := 0
loop:
	for sent < total {
		for due := p.due(time.Now()); sent < due; sent++ {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				break loop
			}
			i, scheduled := sent, p.at(sent)
			wg.Go(func() {
				defer func() { <-sem }()
				lag[i] = max(time.Since(scheduled), time.Nanosecond)
				send(i)
			})
		}
		if sent == total {
			break
		}
		timer.Reset(time.Until(p.at(sent)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			break loop
		}
	}
	wg.Wait()
	return p.start, time.Now()
}

// ticker calls fn every interval until the returned stop is called; stop waits for a running
// fn to return. The bench uses it for its once-a-second progress lines.
func ticker(interval time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
