package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// SleepMaxDefault is the longest sleep a job may ask for.
const SleepMaxDefault = 24 * time.Hour

// SleepHandler waits for the payload's {"ms": N} milliseconds (0 <= N <= 24h) or until its
// context ends. It stands in for real work in tests, demos and load tests.
type SleepHandler struct{}

// Run sleeps. A payload without a valid "ms" fails the job for good (NonRetryable, naming the
// field); an interrupted sleep fails the attempt with the context's error.
func (SleepHandler) Run(ctx context.Context, job Job) (json.RawMessage, error) {
	d, err := sleepDuration(job.Payload)
	if err != nil {
		return nil, NonRetryable(fmt.Errorf("sleep: %w", err))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return json.RawMessage(fmt.Sprintf(`{"slept_ms":%d}`, d.Milliseconds())), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("sleep interrupted after part of %s: %w", d, context.Cause(ctx))
	}
}

// sleepDuration parses {"ms": N}, accepting only an integer in range.
func sleepDuration(payload json.RawMessage) (time.Duration, error) {
	var p struct {
		MS *json.Number `json:"ms"`
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return 0, fmt.Errorf(`payload field "ms": want an object like {"ms": 250}: %w`, err)
	}
	if p.MS == nil {
		return 0, fmt.Errorf(`payload field "ms" is required (milliseconds, 0..%d)`, SleepMaxDefault.Milliseconds())
	}
	n, err := strconv.ParseInt(p.MS.String(), 10, 64)
	if err != nil || n < 0 || n > SleepMaxDefault.Milliseconds() {
		return 0, fmt.Errorf(`payload field "ms" = %s: want an integer number of milliseconds in 0..%d`,
			p.MS.String(), SleepMaxDefault.Milliseconds())
	}
	return time.Duration(n) * time.Millisecond, nil
}
