package sqlgen

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of webhook subscriptions, the webhook tail's cursor and its
// reads of the audit trail and the jobs (store.WebhookExecutor); the deliveries are in
// webhook_deliveries.go.

const webhookColumns = `id, url, events, filter_type, filter_agent, secret, status, consecutive_failures,
	retry_at, disabled_reason, disabled_at, created_by, created_at, updated_at`

// Column caps of the webhook tables: longer text is stored cut rather than failing the write.
const (
	webhookReasonMax = 512
	webhookActorMax  = 160
	webhookErrorMax  = 1024
)

// WebhookInsert inserts a subscription; a taken id is store.ErrConflict.
func (e Executor) WebhookInsert(ctx context.Context, s store.WebhookSubscription) error {
	if !ASCIIID(s.ID) || !ASCIIID(s.URL) {
		return fmt.Errorf("insert webhook %q: id and url must be ASCII", s.ID)
	}
	events, err := json.Marshal(cmpEvents(s.Events))
	if err != nil {
		return fmt.Errorf("insert webhook %s: %w", s.ID, err)
	}
	_, err = e.w.ExecContext(ctx, "INSERT INTO webhook_subscriptions ("+webhookColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.ID, s.URL, string(events), s.FilterType, s.FilterAgent, s.Secret, string(s.Status), s.ConsecutiveFailures,
		e.d.nullTime(s.RetryAt), TruncateUTF8(s.DisabledReason, webhookReasonMax), e.d.nullTimePtr(s.DisabledAt),
		TruncateUTF8(s.CreatedBy, webhookActorMax), e.d.Time(s.CreatedAt), e.d.Time(s.UpdatedAt))
	if err != nil {
		return fmt.Errorf("insert webhook %s: %w", s.ID, e.d.MapErr(err))
	}
	return nil
}

// cmpEvents is events as stored: never null.
func cmpEvents(events []string) []string {
	if events == nil {
		return []string{}
	}
	return events
}

// WebhookGet returns one subscription or store.ErrNotFound.
func (e Executor) WebhookGet(ctx context.Context, id string) (store.WebhookSubscription, error) {
	return getOne(ctx, e, "get webhook "+id, webhookColumns+" FROM webhook_subscriptions WHERE id", id, false, e.d.scanWebhook)
}

// WebhookList returns every subscription, by id.
func (e Executor) WebhookList(ctx context.Context) ([]store.WebhookSubscription, error) {
	subs, err := query(ctx, e.d, e.r, e.d.scanWebhook, "SELECT "+webhookColumns+" FROM webhook_subscriptions ORDER BY id")
	return subs, wrapErr("list webhooks", err)
}

// WebhookDelete deletes the subscription's attempts, deliveries and row, in that order.
func (e Executor) WebhookDelete(ctx context.Context, id string) error {
	what := "delete webhook " + id
	if !ASCIIID(id) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	for _, q := range []string{
		`DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE subscription_id = ?)`,
		`DELETE FROM webhook_deliveries WHERE subscription_id = ?`,
	} {
		if _, err := e.d.ExecCount(ctx, e.w, what, q, id); err != nil {
			return err
		}
	}
	return e.execFound(ctx, what, "DELETE FROM webhook_subscriptions WHERE id = ?", id)
}

// WebhookSetState writes the subscription's delivery state.
func (e Executor) WebhookSetState(ctx context.Context, id string, s store.WebhookState) error {
	what := "set webhook " + id + " state"
	if !ASCIIID(id) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	q := "UPDATE webhook_subscriptions SET status = ?, consecutive_failures = ?, retry_at = ?, updated_at = ?"
	args := []any{string(s.Status), s.ConsecutiveFailures, e.d.nullTime(s.RetryAt), e.d.Time(s.Now)}
	if s.DisabledAt != nil {
		q += ", disabled_reason = ?, disabled_at = ?"
		args = append(args, TruncateUTF8(s.DisabledReason, webhookReasonMax), e.d.Time(*s.DisabledAt))
	}
	q, args = q+" WHERE id = ?", append(args, id)
	if s.From != "" {
		q, args = q+" AND status = ?", append(args, string(s.From))
	}
	return e.execFound(ctx, what, q, args...)
}

// scanWebhook reads a row of webhookColumns.
func (enc Encoding) scanWebhook(row Scanner) (store.WebhookSubscription, error) {
	var (
		s      store.WebhookSubscription
		events []byte
		status string
	)
	if err := row.Scan(&s.ID, &s.URL, &events, &s.FilterType, &s.FilterAgent, &s.Secret, &status, &s.ConsecutiveFailures,
		enc.at(&s.RetryAt), &s.DisabledReason, enc.atPtr(&s.DisabledAt), &s.CreatedBy, enc.at(&s.CreatedAt),
		enc.at(&s.UpdatedAt)); err != nil {
		return store.WebhookSubscription{}, err
	}
	s.Status = store.WebhookStatus(status)
	if err := json.Unmarshal(events, &s.Events); err != nil {
		return store.WebhookSubscription{}, fmt.Errorf("webhook %s: events: %w", s.ID, err)
	}
	s.Events = cmpEvents(s.Events)
	return s, nil
}

// WebhookCursorGet reads the tail's cursor (the row the migration created).
func (e Executor) WebhookCursorGet(ctx context.Context) (store.WebhookCursor, error) {
	var (
		c    store.WebhookCursor
		gaps []byte
	)
	err := e.w.QueryRowContext(ctx, "SELECT last_id, gaps, version FROM webhook_cursor WHERE id = 1").Scan(&c.LastID, &gaps, &c.Version)
	if err != nil {
		return c, fmt.Errorf("read webhook cursor: %w", e.d.MapErr(err))
	}
	if err := json.Unmarshal(gaps, &c.Gaps); err != nil {
		return c, fmt.Errorf("read webhook cursor: gaps: %w", err)
	}
	return c, nil
}

// WebhookCursorSet writes the cursor under a compare-and-set on its version.
func (e Executor) WebhookCursorSet(ctx context.Context, c store.WebhookCursor, expect int64, now time.Time) error {
	// The times at the precision of the time columns, as everything the store gives back.
	gaps := make([]store.WebhookGap, len(c.Gaps))
	for i, g := range c.Gaps {
		gaps[i] = store.WebhookGap{ID: g.ID, FirstSeen: Micro(g.FirstSeen)}
	}
	raw, err := json.Marshal(gaps)
	if err != nil {
		return fmt.Errorf("write webhook cursor: %w", err)
	}
	n, err := e.d.ExecCount(ctx, e.w, "write webhook cursor", `UPDATE webhook_cursor SET last_id = ?, gaps = ?,
		version = version + 1, updated_at = ? WHERE id = 1 AND version = ?`, c.LastID, string(raw), e.d.Time(now), expect)
	if err == nil && n == 0 {
		err = fmt.Errorf("write webhook cursor: version %d is no longer current: %w", expect, store.ErrConflict)
	}
	return err
}

// AuditGetMany returns the audit rows among ids, by id.
func (e Executor) AuditGetMany(ctx context.Context, ids []int64) ([]store.AuditEvent, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	var out []store.AuditEvent
	for chunk := range slices.Chunk(ids, max(e.d.Chunk, 1)) {
		evs, err := query(ctx, e.d, e.r, e.d.scanAudit, "SELECT "+auditColumns+" FROM orchestrator_audit WHERE id IN ("+
			Placeholders(len(chunk))+") ORDER BY id", Args(chunk)...)
		if err != nil {
			return nil, fmt.Errorf("get audit events: %w", err)
		}
		out = append(out, evs...)
	}
	return out, nil
}

// WebhookJobs reads what deliveries say of the jobs among ids; a result larger than resultMax
// bytes stays in the database (OCTET_LENGTH: bytes in both dialects).
func (e Executor) WebhookJobs(ctx context.Context, ids []string, resultMax int) ([]store.WebhookJob, error) {
	scan := func(row Scanner) (store.WebhookJob, error) {
		var (
			j      store.WebhookJob
			status string
			result []byte
		)
		err := row.Scan(&j.ID, &j.Type, &j.Agent, &status, &j.Attempts, &j.MaxAttempts, &j.CallbackURL, &j.LastError,
			&result, &j.ResultBytes)
		j.Status, j.Result = store.JobStatus(status), NilIfEmpty(result)
		return j, err
	}
	jobs, err := chunked(DistinctIDs(ids), e.d.Chunk, func(chunk []string) ([]store.WebhookJob, error) {
		return query(ctx, e.d, e.r, scan, `SELECT job_id, type, agent, status, attempts, max_attempts, callback_url,
			last_error, CASE WHEN OCTET_LENGTH(result) <= ? THEN result END, COALESCE(OCTET_LENGTH(result), 0)
			FROM orchestrator_jobs WHERE job_id IN (`+Placeholders(len(chunk))+")", append([]any{resultMax}, Args(chunk)...)...)
	})
	return jobs, wrapErr("read the jobs of webhook events", err)
}
