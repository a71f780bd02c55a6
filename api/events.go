package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/store"
)

// Event feed timing.
const (
	// eventPoll is how often an open feed looks for new audit rows.
	eventPoll = 200 * time.Millisecond
	// eventKeepAlive is how often an idle feed sends a comment, so proxies keep it open.
	eventKeepAlive = 15 * time.Second
	// eventSettle is how long the all-jobs feed waits for a missing audit id to commit before it
	// skips it: ids are assigned at insert, not at commit, so a row with a lower id may become
	// visible after a higher one (a rolled-back transaction leaves a gap that never fills).
	eventSettle = 2 * time.Second
	// eventBatch is the most audit rows read per poll.
	eventBatch = 200
)

// jobEvents handles GET /jobs/:id/events: the job's transitions from the audit trail as
// Server-Sent Events, from after Last-Event-ID (header, or ?last_event_id=) on. The stream ends
// after the job is terminal and every event up to that state has been sent. A job's audit rows
// are written under its row lock, so they commit in id order and the feed has no gaps.
func (s *Server) jobEvents(c *gin.Context) {
	job, err := s.visibleJob(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	after, err := lastEventID(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	feed := s.startFeed(c)
	ctx := c.Request.Context()
	for {
		// Read the status first: when it is terminal, every event up to it has committed and
		// the audit read that follows sees them all.
		cur, err := s.engine.Get(ctx, job.ID)
		if err != nil {
			feed.fail(err)
			return
		}
		evs, err := s.engine.Store().AuditList(ctx, store.AuditListParams{JobID: job.ID, AfterID: after, Limit: eventBatch})
		if err != nil {
			feed.fail(err)
			return
		}
		for _, ev := range evs {
			feed.send(ev)
			after = ev.ID
		}
		if len(evs) == eventBatch {
			continue
		}
		if cur.Status.Terminal() {
			feed.end(string(cur.Status))
			return
		}
		if !feed.wait() {
			return
		}
	}
}

// allEvents handles GET /events?since=ID (admin): every audit row after the cursor, without
// end. A gap in the ids is waited on for eventSettle before it is skipped.
func (s *Server) allEvents(c *gin.Context) {
	after, err := lastEventID(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	feed := s.startFeed(c)
	ctx := c.Request.Context()
	for {
		evs, err := s.engine.Store().AuditList(ctx, store.AuditListParams{AfterID: after, Limit: eventBatch})
		if err != nil {
			feed.fail(err)
			return
		}
		for _, ev := range evs {
			if ev.ID != after+1 && after != 0 && time.Since(ev.TS) < eventSettle {
				break // a lower id may still commit: try again shortly
			}
			feed.send(ev)
			after = ev.ID
		}
		if len(evs) == eventBatch {
			continue
		}
		if !feed.wait() {
			return
		}
	}
}

// lastEventID reads the resume cursor: the Last-Event-ID header, else ?last_event_id= or
// ?since=; 0 means from the beginning.
func lastEventID(c *gin.Context) (int64, error) {
	field, v := "Last-Event-ID", c.GetHeader("Last-Event-ID")
	for _, q := range []string{"last_event_id", "since"} {
		if v == "" {
			field, v = q, c.Query(q)
		}
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest(field, "want a non-negative event id, got %q", v)
	}
	return n, nil
}

// sseFeed writes one Server-Sent Events stream.
type sseFeed struct {
	s        *Server
	c        *gin.Context
	rc       *http.ResponseController
	lastSent time.Time
}

// startFeed sends the SSE headers and lifts the server's write timeout for this response.
func (s *Server) startFeed(c *gin.Context) *sseFeed {
	rc := http.NewResponseController(c.Writer)
	_ = rc.SetWriteDeadline(time.Time{}) // a feed outlives the server's WriteTimeout
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	f := &sseFeed{s: s, c: c, rc: rc, lastSent: time.Now()}
	f.write(": feed open\n\n")
	return f
}

func (f *sseFeed) write(s string) {
	_, _ = f.c.Writer.WriteString(s)
	_ = f.rc.Flush()
	f.lastSent = time.Now()
}

// send writes one audit row as an event named after its type.
func (f *sseFeed) send(ev store.AuditEvent) {
	data, _ := json.Marshal(client.Event{
		ID: ev.ID, TS: ev.TS.UTC(), EventType: ev.EventType, JobID: ev.JobID, PoolID: ev.PoolID,
		Actor: ev.Actor, Details: ev.Details,
	})
	f.write(fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", ev.ID, ev.EventType, data))
}

// end tells the client the feed is complete (the job is terminal).
func (f *sseFeed) end(status string) {
	f.write(fmt.Sprintf("event: end\ndata: {\"status\":%q}\n\n", status))
}

// fail ends the stream with an error event; the client reconnects with Last-Event-ID.
func (f *sseFeed) fail(err error) {
	status, code := ErrorStatus(err)
	if status >= 500 && f.c.Request.Context().Err() == nil {
		f.s.log.Warn("event feed failed", "route", f.c.FullPath(), "error", err)
	}
	f.write(fmt.Sprintf("event: error\ndata: {\"code\":%q}\n\n", code))
}

// wait pauses until the next poll, sending a keep-alive comment when the feed has been quiet;
// false when the client went away.
func (f *sseFeed) wait() bool {
	select {
	case <-f.c.Request.Context().Done():
		return false
	case <-time.After(eventPoll):
	}
	if time.Since(f.lastSent) >= eventKeepAlive {
		f.write(": keep-alive\n\n")
	}
	return true
}
