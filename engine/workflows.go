package engine

import (
	"encoding/json"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// Audit event types of workflows (their rows carry store.WorkflowAuditKey as job_id).
const (
	EventWorkflowCreated   = "workflow.created"
	EventWorkflowDone      = "workflow.done"
	EventWorkflowFailed    = "workflow.failed"
	EventWorkflowCancelled = "workflow.cancelled"
)

// workflowEvent is an audit row of workflow id.
func workflowEvent(id, typ, actor string, now time.Time, details map[string]any) store.AuditEvent {
	ev := store.AuditEvent{TS: now, EventType: typ, JobID: store.WorkflowAuditKey(id), Actor: actor}
	if len(details) > 0 {
		ev.Details, _ = json.Marshal(details)
	}
	return ev
}
