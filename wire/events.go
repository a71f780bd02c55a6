package wire

import (
	"encoding/json"
	"time"
)

// Event is one entry of the job event feeds (GET /jobs/{id}/events, GET /events): an audit row.
type Event struct {
	ID        int64     `json:"id"`
	TS        time.Time `json:"ts"`
	EventType string    `json:"event_type"`
	JobID     string    `json:"job_id,omitempty"`
	PoolID    string    `json:"pool_id,omitempty"`
	// WorkflowID names the workflow of a workflow.* event.
	WorkflowID string          `json:"workflow_id,omitempty"`
	Actor      string          `json:"actor,omitempty"`
	Details    json.RawMessage `json:"details,omitempty"`
}
