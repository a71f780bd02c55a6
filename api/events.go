package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
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
	// streamRetryAfter is the Retry-After of a stream refused for the per-token cap.
	streamRetryAfter = 5 * time.Second
)

// CodeTooManyStreams refuses an event stream over the token's cap (max_streams_per_token).
const CodeTooManyStreams = "too_many_streams"

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
	feed, err := s.startFeed(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	defer feed.close()
	ctx := c.Request.Context()
	for {
		if feed.revoked() {
			return
		}
		// Read the status first: when it is terminal, every event up to it has committed and
		// the audit read that follows sees them all.
		cur, err := s.engine.Get(ctx, job.ID)
		if err != nil {
			feed.fail(err)
			return
		}
		evs, err := s.store.AuditList(ctx, store.AuditListParams{JobID: job.ID, AfterID: after, Limit: eventBatch})
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
	feed, err := s.startFeed(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	defer feed.close()
	ctx := c.Request.Context()
	for {
		if feed.revoked() {
			return
		}
		evs, err := s.store.AuditList(ctx, store.AuditListParams{AfterID: after, Limit: eventBatch})
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
	// id is who opened the feed; tokens the token set it was last checked against (nil until
	// the first check), so that a reload is noticed by a pointer comparison.
	id     Identity
	tokens *Tokens
}

// startFeed takes one of the token's stream slots (a 429 when they are all taken), sends the
// SSE headers and lifts the server's write timeout for this response. The caller closes the
// feed when it ends, which gives the slot back.
func (s *Server) startFeed(c *gin.Context) (*sseFeed, error) {
	id := mustIdentity(c)
	limit := s.maxStreamsPerToken()
	if !s.feeds.acquire(id.TokenID, limit) {
		c.Header("Retry-After", strconv.Itoa(int(streamRetryAfter/time.Second)))
		return nil, &Error{Status: http.StatusTooManyRequests, Code: CodeTooManyStreams, Message: fmt.Sprintf(
			"this token has %d event streams open, the most max_streams_per_token allows: close one first", limit)}
	}
	rc := http.NewResponseController(c.Writer)
	_ = rc.SetWriteDeadline(time.Time{}) // a feed outlives the server's WriteTimeout
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	f := &sseFeed{s: s, c: c, rc: rc, lastSent: time.Now(), id: id}
	f.write(": feed open\n\n")
	return f, nil
}

// close gives the feed's stream slot back.
func (f *sseFeed) close() { f.s.feeds.release(f.id.TokenID) }

// revoked reports whether the feed's token no longer may read it, after a reload of the tokens
// (SetTokens) that removed the token or changed its role or agent; it then ends the stream with
// an error event. Between reloads it costs one atomic load per poll; after one, the request is
// authenticated again against the new set.
func (f *sseFeed) revoked() bool {
	cur := f.s.tokens.Load()
	if f.tokens != nil && cur == f.tokens {
		return false
	}
	f.tokens = cur
	now, err := f.s.authenticate(f.c)
	if err == nil && now.Role == f.id.Role && now.Agent == f.id.Agent && now.TokenID == f.id.TokenID {
		return false
	}
	f.write("event: error\ndata: {\"code\":\"" + CodeUnauthorized + "\"}\n\n")
	return true
}

// maxStreamsPerToken is the configured cap of open streams per token.
func (s *Server) maxStreamsPerToken() int {
	if s.cfg != nil && s.cfg.MaxStreamsPerToken > 0 {
		return s.cfg.MaxStreamsPerToken
	}
	return config.MaxStreamsPerTokenDefault
}

// feedCounter counts the open event streams of each token (by token id; every tokenless
// loopback caller of dev mode shares the id "loopback", so they count as one token). The zero
// value is ready.
type feedCounter struct {
	mu   sync.Mutex
	open map[string]int
}

// acquire takes a slot of token when fewer than limit are taken.
func (f *feedCounter) acquire(token string, limit int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open == nil {
		f.open = map[string]int{}
	}
	if f.open[token] >= limit {
		return false
	}
	f.open[token]++
	return true
}

// release gives a slot of token back.
func (f *feedCounter) release(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open[token]--; f.open[token] <= 0 {
		delete(f.open, token)
	}
}

// count returns the open streams of token.
func (f *feedCounter) count(token string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open[token]
}

func (f *sseFeed) write(s string) {
	_, _ = f.c.Writer.WriteString(s)
	_ = f.rc.Flush()
	f.lastSent = time.Now()
}

// send writes one audit row as an event named after its type.
func (f *sseFeed) send(ev store.AuditEvent) {
	out := wire.Event{
		ID: ev.ID, TS: ev.TS.UTC(), EventType: ev.EventType, JobID: ev.JobID, PoolID: ev.PoolID,
		Actor: ev.Actor, Details: ev.Details,
	}
	if wf, ok := strings.CutPrefix(ev.JobID, store.WorkflowAuditPrefix); ok {
		out.JobID, out.WorkflowID = "", wf // a workflow's row (store.WorkflowAuditKey)
	}
	data, _ := json.Marshal(out)
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
