package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// watchRetryMax caps the pause between reconnections of a watch.
const watchRetryMax = 5 * time.Second

// WatchJob follows the event feed of a job from after lastID (0: from its submission), calling
// fn for each event in order, until the job is terminal (it returns its final status), ctx ends,
// or fn returns an error. A dropped connection is resumed with Last-Event-ID, so fn sees every
// event exactly once. API errors (401, 404, ...) end the watch at once.
func (c *Client) WatchJob(ctx context.Context, jobID string, lastID int64, fn func(Event) error) (string, error) {
	// A feed outlives the per-call timeout: same transport, no overall limit.
	hc := &http.Client{Transport: c.hc.Transport}
	delay := 100 * time.Millisecond
	for {
		status, err := c.watchOnce(ctx, hc, "/jobs/"+jobID+"/events", &lastID, fn)
		if status != "" || err == nil {
			return status, err
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) || ctx.Err() != nil || errors.Is(err, errCallback) {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, watchRetryMax)
	}
}

// errCallback marks an error returned by the caller's fn.
var errCallback = errors.New("watch callback")

// watchOnce reads one connection of a feed. It returns the final status when the feed ended,
// or an error when it broke off; *lastID follows the events delivered.
func (c *Client) watchOnce(ctx context.Context, hc *http.Client, path string, lastID *int64, fn func(Event) error) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return "", fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if *lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*lastID, 10))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("watch %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }() // read below; a close error loses nothing
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return "", newAPIError(resp, raw)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var name, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "" && name != "":
			switch name {
			case "end":
				var end struct{ Status string }
				_ = json.Unmarshal([]byte(data), &end)
				return end.Status, nil
			case "error":
				return "", fmt.Errorf("watch %s: the server ended the feed: %s", path, data)
			}
			var ev Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				return "", fmt.Errorf("decode event: %w", err)
			}
			if err := fn(ev); err != nil {
				return "", fmt.Errorf("%w: %w", errCallback, err)
			}
			*lastID = ev.ID
			name, data = "", ""
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read feed %s: %w", path, err)
	}
	return "", fmt.Errorf("read feed %s: %w", path, io.ErrUnexpectedEOF)
}
