// Package webhooks sends the cluster's events out over HTTP (docs/architecture.md,
// "Webhooks"): to the endpoints admins subscribe (Service), to a job's own callback_url, and,
// before a job of a type that has one starts, to its pre-run hook (PreRun).
//
// Events are not written on the job's hot path. The leader's Tailer reads the audit trail
// after a cursor kept in the database, turns the rows that are events into delivery rows (the
// outbox, one per event and endpoint) and moves the cursor in the same fenced transaction;
// the leader's Sender posts the due deliveries, signed, and records each attempt, fenced too.
// A delivery is therefore sent at least once, with the same Idempotency-Key on every attempt,
// whatever leader sends it.
package webhooks

import (
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/store"
)

// Event names, what a subscription lists and a delivery's type says.
const (
	EventJobSubmitted  = "job.submitted"   // a job was accepted (pending)
	EventJobStarted    = "job.started"     // an attempt started running
	EventJobDone       = "job.done"        // the job succeeded (terminal)
	EventJobFailed     = "job.failed"      // an attempt failed and will be retried
	EventJobDeadLetter = "job.dead_letter" // the job failed for good (terminal until replayed)
	EventJobCancelled  = "job.cancelled"   // the job was cancelled (terminal)
	EventJobReplayed   = "job.replayed"    // an operator replayed a dead letter
	// EventScheduleFired and EventScheduleSkipped come from the cron schedules: a schedule
	// submitted its job, or skipped a fire time (details: schedule_id, fire_time, reason,
	// job_id).
	EventScheduleFired   = "schedule.fired"
	EventScheduleSkipped = "schedule.skipped"
	// EventWebhookDisabled: an endpoint was disabled after failing too many times in a row.
	EventWebhookDisabled = "webhook.disabled"
	// EventPreRun is the type of a pre-run hook's call (never a subscription's).
	EventPreRun = "job.pre_run"
)

// Events lists the event names a subscription may name.
var Events = []string{EventJobSubmitted, EventJobStarted, EventJobDone, EventJobFailed, EventJobDeadLetter,
	EventJobCancelled, EventJobReplayed, EventScheduleFired, EventScheduleSkipped, EventWebhookDisabled}

// Audit event types of the webhooks themselves.
const (
	AuditCreated  = "webhook.created"
	AuditDeleted  = "webhook.deleted"
	AuditEnabled  = "webhook.enabled"
	AuditDisabled = EventWebhookDisabled
)

// Terminal reports whether event ends its job: the events a job's callback_url receives.
func Terminal(event string) bool {
	return event == EventJobDone || event == EventJobDeadLetter || event == EventJobCancelled
}

// Known reports whether name is an event a subscription may name.
func Known(name string) bool { return slices.Contains(Events, name) }

// EventOf maps an audit row's type to the event it is, if any. A job's transitions map by
// their target: "job.running->done" is job.done; a failed attempt is recorded as two rows in
// one transaction, "job.<s>->failed" and then "job.failed->pending" (retried) or
// "job.failed->dead_letter", and the second one is the event (the first one's details give
// its error). The other rows (claims, placements, leases, pools) are no events.
func EventOf(auditType string) (string, bool) {
	switch auditType {
	case "job.submitted":
		return EventJobSubmitted, true
	case EventScheduleFired, EventScheduleSkipped, EventWebhookDisabled:
		return auditType, true
	}
	from, to, ok := strings.Cut(strings.TrimPrefix(auditType, "job."), "->")
	if !ok || !strings.HasPrefix(auditType, "job.") {
		return "", false
	}
	switch {
	case to == string(store.JobDone):
		return EventJobDone, true
	case to == string(store.JobCancelled):
		return EventJobCancelled, true
	case from == string(store.JobFailed) && to == string(store.JobPending):
		return EventJobFailed, true
	case to == string(store.JobDeadLetter):
		return EventJobDeadLetter, true
	case from == string(store.JobDeadLetter) && to == string(store.JobPending):
		return EventJobReplayed, true
	case from == string(store.JobClaimed) && to == string(store.JobRunning):
		return EventJobStarted, true
	}
	return "", false
}

// statusAfter is the job's status right after an audit row of a transition ("pending" for a
// submit).
func statusAfter(auditType string) string {
	if auditType == "job.submitted" {
		return string(store.JobPending)
	}
	if _, to, ok := strings.Cut(auditType, "->"); ok {
		return to
	}
	return ""
}
