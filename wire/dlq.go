package wire

import (
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
