package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

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
	return call[DeadLetterList](ctx, c, http.MethodGet, "/dlq", q, nil, "list dead letters")
}

// ReplayDeadLetter sends a dead letter back to pending with a fresh attempt budget
// (POST /dlq/{job_id}/replay, admin) and returns the job as it is afterwards. A job that is
// not in the queue is a 409 (code not_dead_letter).
func (c *Client) ReplayDeadLetter(ctx context.Context, jobID string) (Job, error) {
	return call[Job](ctx, c, http.MethodPost, "/dlq/"+url.PathEscape(jobID)+"/replay", nil, struct{}{},
		"replay dead letter "+jobID)
}

// PurgeDeadLetter removes a dead letter from the queue (DELETE /dlq/{job_id}, admin); the job
// stays dead_letter and is returned as it is afterwards.
func (c *Client) PurgeDeadLetter(ctx context.Context, jobID string) (Job, error) {
	return call[Job](ctx, c, http.MethodDelete, "/dlq/"+url.PathEscape(jobID), nil, nil, "purge dead letter "+jobID)
}
