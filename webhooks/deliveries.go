package webhooks

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// This file turns audit rows into deliveries: which endpoints an event goes to, and the body
// each of them receives.

// callbackTarget names a job's callback in idempotency keys (a subscription id elsewhere).
const callbackTarget = "callback"

// errorMax caps the error a job event carries (a job's last_error holds up to 64 KiB).
const errorMax = 8 << 10

// IdempotencyKey is the key of the delivery of audit event eventID to target (a subscription
// id, or "" for the job's callback): the same for every attempt, and for every leader that
// might queue it.
func IdempotencyKey(eventID int64, subscription string) string {
	if subscription == store.DeliveryCallback {
		subscription = callbackTarget
	}
	return fmt.Sprintf("%d-%s", eventID, subscription)
}

// planner builds the deliveries of one pass's events.
type planner struct {
	subs    []store.WebhookSubscription // the active ones
	jobs    map[string]store.WebhookJob
	maxBody int
	now     time.Time
	// failed are the details of each job's last "->failed" row seen: the error of the
	// job.failed or job.dead_letter row that follows it in the same transaction.
	failed map[string]json.RawMessage
}

// plan returns the deliveries of events (in id order).
func (p *planner) plan(events []store.AuditEvent) ([]store.WebhookDelivery, error) {
	var out []store.WebhookDelivery
	for _, ev := range events {
		if statusAfter(ev.EventType) == string(store.JobFailed) && ev.JobID != "" {
			p.failed[ev.JobID] = ev.Details
		}
		name, ok := EventOf(ev.EventType)
		if !ok {
			continue
		}
		job, hasJob := p.jobs[ev.JobID]
		var targets []store.WebhookSubscription
		for _, s := range p.subs {
			if slices.Contains(s.Events, name) && matches(s, ev, job, hasJob) {
				targets = append(targets, s)
			}
		}
		callback := hasJob && job.CallbackURL != "" && Terminal(name)
		if len(targets) == 0 && !callback {
			continue
		}
		body, err := p.body(ev, name, job, hasJob)
		if err != nil {
			return nil, err
		}
		d := store.WebhookDelivery{Agent: job.Agent, EventID: ev.ID, EventType: name, EventAt: ev.TS, JobID: ev.JobID,
			Body: body, NextAttemptAt: p.now, CreatedAt: p.now}
		for _, s := range targets {
			d.SubscriptionID, d.URL, d.IdempotencyKey = s.ID, s.URL, IdempotencyKey(ev.ID, s.ID)
			out = append(out, d)
		}
		if callback {
			d.SubscriptionID, d.URL, d.IdempotencyKey = store.DeliveryCallback, job.CallbackURL,
				IdempotencyKey(ev.ID, store.DeliveryCallback)
			out = append(out, d)
		}
	}
	return out, nil
}

// matches reports whether event ev passes s's filter: the type and agent of its job, or, for
// an event without a job (a schedule's), the "type" and "agent" of its details. An event that
// names neither passes only a filter that asks for none.
func matches(s store.WebhookSubscription, ev store.AuditEvent, job store.WebhookJob, hasJob bool) bool {
	if s.FilterType == "" && s.FilterAgent == "" {
		return true
	}
	typ, agent := job.Type, job.Agent
	if !hasJob {
		var d struct{ Type, Agent string }
		_ = json.Unmarshal(ev.Details, &d) // details that are not an object name nothing
		typ, agent = d.Type, d.Agent
	}
	return (s.FilterType == "" || s.FilterType == typ) && (s.FilterAgent == "" || s.FilterAgent == agent)
}

// body is the JSON body of ev's deliveries: a wire.WebhookEvent whose data says what the job
// event is, or carries the details of another event. A body over maxBody leaves the job's
// result out (result_omitted).
func (p *planner) body(ev store.AuditEvent, name string, job store.WebhookJob, hasJob bool) (json.RawMessage, error) {
	data := ev.Details
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if ev.JobID != "" && strings.HasPrefix(name, "job.") {
		jd := p.jobData(ev, name, job, hasJob)
		raw, err := json.Marshal(jd)
		if err == nil && len(raw) > p.maxBody-256 && jd.Result != nil {
			jd.Result, jd.ResultOmitted = nil, true
			raw, err = json.Marshal(jd)
		}
		if err != nil {
			return nil, fmt.Errorf("webhook event %d: %w", ev.ID, err)
		}
		data = raw
	}
	raw, err := json.Marshal(wire.WebhookEvent{ID: fmt.Sprintf("evt_%d", ev.ID), Type: name, CreatedAt: ev.TS.UTC(), Data: data})
	if err != nil {
		return nil, fmt.Errorf("webhook event %d: %w", ev.ID, err)
	}
	return raw, nil
}

// jobData is the data of a job event.
func (p *planner) jobData(ev store.AuditEvent, name string, job store.WebhookJob, hasJob bool) wire.WebhookJobData {
	d := wire.WebhookJobData{JobID: ev.JobID, Status: statusAfter(ev.EventType), Actor: ev.Actor, Details: ev.Details}
	if hasJob {
		d.Type, d.Agent, d.Attempt, d.MaxAttempts = job.Type, job.Agent, job.Attempts, job.MaxAttempts
	}
	var details struct {
		Attempt *int `json:"attempt"`
	}
	_ = json.Unmarshal(ev.Details, &details)
	if details.Attempt != nil {
		d.Attempt = *details.Attempt
	}
	switch name {
	case EventJobFailed, EventJobDeadLetter:
		var f struct {
			Attempt *int   `json:"attempt"`
			Error   string `json:"error"`
		}
		if raw, ok := p.failed[ev.JobID]; ok {
			_ = json.Unmarshal(raw, &f)
		}
		d.Error = f.Error
		if f.Attempt != nil {
			d.Attempt = *f.Attempt
		}
		if d.Error == "" && hasJob {
			d.Error = job.LastError // the failed row was read in an earlier pass
		}
		if len(d.Error) > errorMax {
			d.Error = clip(d.Error[:errorMax])
		}
	case EventJobDone:
		switch {
		case job.Result != nil:
			d.Result = job.Result
		case job.ResultBytes > 0:
			d.ResultOmitted = true
		}
	}
	return d
}
