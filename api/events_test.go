package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	id    int64
	event string
	data  string
}

// openFeed connects to an event feed and returns a channel of its events (closed at the end).
func openFeed(t *testing.T, ctx context.Context, url, token string, lastID int64) (<-chan sseEvent, int) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	ch := make(chan sseEvent, 64)
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		close(ch)
		return ch, resp.StatusCode
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id, _ = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch, resp.StatusCode
}

func next(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "feed ended early")
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return sseEvent{}
	}
}

func eventTypes(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.event
	}
	return out
}

// until reads events up to and including the first of type typ.
func until(t *testing.T, ch <-chan sseEvent, typ string) []sseEvent {
	t.Helper()
	var out []sseEvent
	for {
		ev := next(t, ch)
		out = append(out, ev)
		if ev.event == typ {
			return out
		}
	}
}

func TestJobEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(b.srv.Handler())
	t.Cleanup(srv.Close)

	t.Run("ResumeWithoutGapsOrDuplicates", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context() // ends every feed when the subtest ends, passed or not
		id := b.submitJob(t, "alice")
		url := srv.URL + "/jobs/" + id + "/events"
		feedCtx, disconnect := context.WithCancel(ctx)
		ch, status := openFeed(t, feedCtx, url, b.tokens["alice"], 0)
		require.Equal(t, http.StatusOK, status)
		seen := until(t, ch, engine.EventSubmitted)

		res, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w1", Items: []engine.ClaimItem{{JobID: id}}})
		require.NoError(t, err)
		require.Len(t, res.Claimed, 1)
		seen = append(seen, until(t, ch, "job.pending->claimed")...)
		disconnect()

		// Events while nobody listens.
		_, err = b.eng.Start(ctx, engine.StartParams{WorkerID: "w1", JobIDs: []string{id}})
		require.NoError(t, err)
		ch, status = openFeed(t, ctx, url, b.tokens["alice"], seen[len(seen)-1].id)
		require.Equal(t, http.StatusOK, status)
		seen = append(seen, until(t, ch, "job.claimed->running")...)
		_, err = b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w1", Results: []engine.Result{
			{JobID: id, Attempt: 1, Done: true, LeaseToken: res.Claimed[0].LeaseToken},
		}})
		require.NoError(t, err)
		seen = append(seen, until(t, ch, "job.running->done")...)
		rest := until(t, ch, "end")
		require.JSONEq(t, `{"status":"done"}`, rest[len(rest)-1].data)
		seen = append(seen, rest[:len(rest)-1]...)
		_, open := <-ch
		require.False(t, open, "the feed closes after the terminal state")

		audit, err := b.st.AuditList(ctx, store.AuditListParams{JobID: id, Limit: 100})
		require.NoError(t, err)
		require.Len(t, seen, len(audit))
		for i, ev := range audit {
			require.Equal(t, ev.ID, seen[i].id)
			var body wire.Event
			require.NoError(t, json.Unmarshal([]byte(seen[i].data), &body))
			require.Equal(t, ev.EventType, body.EventType)
			require.Equal(t, id, body.JobID)
		}
	})

	t.Run("TerminalJobReplaysAndEnds", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		id := b.submitJob(t, "alice")
		_, err := b.eng.Cancel(ctx, id, "agent:alice")
		require.NoError(t, err)
		ch, _ := openFeed(t, ctx, srv.URL+"/jobs/"+id+"/events", b.tokens["admin"], 0)
		evs := until(t, ch, "end")
		require.Equal(t, []string{engine.EventSubmitted, "job.pending->cancelled", "end"}, eventTypes(evs))
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		id := b.submitJob(t, "alice")
		_, status := openFeed(t, ctx, srv.URL+"/jobs/"+id+"/events", b.tokens["bob"], 0)
		require.Equal(t, http.StatusNotFound, status, "another agent's job is invisible")
		_, status = openFeed(t, ctx, srv.URL+"/jobs/"+id+"/events?last_event_id=x", b.tokens["alice"], 0)
		require.Equal(t, http.StatusBadRequest, status)
		_, status = openFeed(t, ctx, srv.URL+"/events", b.tokens["alice"], 0)
		require.Equal(t, http.StatusForbidden, status)
	})

	t.Run("ClientWatch", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		id := b.submitJob(t, "alice")
		cl := client.New(srv.URL, b.tokens["alice"])
		var got []string
		status, err := cl.WatchJob(ctx, id, 0, func(ev wire.Event) error {
			got = append(got, ev.EventType)
			if ev.EventType == engine.EventSubmitted {
				_, err := b.eng.Cancel(ctx, id, "agent:alice")
				return err
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, "cancelled", status)
		require.Equal(t, []string{engine.EventSubmitted, "job.pending->cancelled"}, got)

		_, err = cl.WatchJob(ctx, "no-such-job", 0, func(wire.Event) error { return nil })
		require.True(t, client.IsStatus(err, http.StatusNotFound), "%v", err)
	})

	t.Run("AllEvents", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		id := b.submitJob(t, "bob")
		feedCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, status := openFeed(t, feedCtx, srv.URL+"/events?since=0", b.tokens["admin"], 0)
		require.Equal(t, http.StatusOK, status)
		for {
			ev := next(t, ch)
			var body wire.Event
			require.NoError(t, json.Unmarshal([]byte(ev.data), &body))
			if body.JobID == id {
				require.Equal(t, engine.EventSubmitted, ev.event)
				return
			}
		}
	})
}
