package worker

import (
	"context"
	"encoding/json"
)

// NoopHandler completes every job at once with the result {}. It exists to measure the
// orchestrator's own overhead (benchmarks, smoke tests) without any work in the way.
type NoopHandler struct{}

// Run returns {} without looking at the payload.
func (NoopHandler) Run(context.Context, Job) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}
