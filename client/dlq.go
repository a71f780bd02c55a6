package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// DeadLetter is one job of the dead-letter queue (GET /dlq): a job that exhausted its attempts
// or failed with a non-retryable error. Replay sends it back to pending with a fresh attempt
// budget; purge removes it from the queue (the job stays dead_letter).
type DeadLetter struct {
	JobID string `json:"job_id"`
	Type  string `json:"type"`
	Agent string `json:"agent"`
	// OriginStream is the stream the job was delivered on ("" for a type no longer configured).
	OriginStream string `json:"origin_stream,omitempty"`
	Attempts     int    `json:"attempts"`
	MaxAttempts  int    `json:"max_attempts"`
	LastError    string `json:"last_error,omitempty"`
	// StreamID is the entry in stream:orchestrator:dlq; empty for the moment between the dead
	// letter and its publication to the stream.
	StreamID       string     `json:"stream_id,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	DeadLetteredAt *time.Time `json:"dead_lettered_at,omitempty"`
}

// DeadLetterList is a page of GET /dlq, newest job first. NextCursor is empty on the last page.
type DeadLetterList struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextCursor  string       `json:"next_cursor,omitempty"`
}

// ListDeadLettersParams filter GET /dlq; empty fields are not sent.
type ListDeadLettersParams struct {
	Type string
	// Limit is the page size (0: the server's default).
	Limit int
	// Cursor is the NextCursor of the previous page.
	Cursor string
}

// ListDeadLetters returns one page of the dead-letter queue (GET /dlq, admin).
func (c *Client) ListDeadLetters(ctx context.Context, p ListDeadLettersParams) (DeadLetterList, error) {
	q := url.Values{}
	if p.Type != "" {
		q.Set("type", p.Type)
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	var out DeadLetterList
	err := c.do(ctx, http.MethodGet, "/dlq", q, nil, &out)
	return out, wrap(err, "list dead letters")
}

// ReplayDeadLetter sends a dead letter back to pending with a fresh attempt budget
// (POST /dlq/{job_id}/replay, admin) and returns the job as it is afterwards. A job that is
// not in the queue is a 409 (code not_dead_letter).
func (c *Client) ReplayDeadLetter(ctx context.Context, jobID string) (Job, error) {
	var out Job
	err := c.do(ctx, http.MethodPost, "/dlq/"+url.PathEscape(jobID)+"/replay", nil, struct{}{}, &out)
	return out, wrap(err, "replay dead letter "+jobID)
}

// PurgeDeadLetter removes a dead letter from the queue (DELETE /dlq/{job_id}, admin); the job
// stays dead_letter and is returned as it is afterwards.
func (c *Client) PurgeDeadLetter(ctx context.Context, jobID string) (Job, error) {
	var out Job
	err := c.do(ctx, http.MethodDelete, "/dlq/"+url.PathEscape(jobID), nil, nil, &out)
	return out, wrap(err, "purge dead letter "+jobID)
}
