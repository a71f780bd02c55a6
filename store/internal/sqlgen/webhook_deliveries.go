package sqlgen

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of the webhook outbox: deliveries and their attempts
// (store.WebhookExecutor).

const (
	// deliveryColumnsAfterBody are the columns of webhook_deliveries after body.
	deliveryColumnsAfterBody = `status, attempts, next_attempt_at, last_status_code, last_error, created_at,
	updated_at, finished_at`
	deliveryColumnsBeforeBody = `id, subscription_id, url, agent, event_id, event_type, event_at, job_id, idempotency_key`
	deliveryColumns           = deliveryColumnsBeforeBody + ", body, " + deliveryColumnsAfterBody
	// deliveryColumnsNoBody reads a delivery without its body, for listings.
	deliveryColumnsNoBody = deliveryColumnsBeforeBody + ", NULL, " + deliveryColumnsAfterBody
)

// WebhookDeliveryInsert queues deliveries with one multi-row INSERT per chunk; a taken
// idempotency key leaves its row as it is (Dialect.Upsert of the key onto itself).
func (e Executor) WebhookDeliveryInsert(ctx context.Context, ds []store.WebhookDelivery) error {
	const row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	for chunk := range slices.Chunk(ds, max(e.d.Chunk, 1)) {
		var q strings.Builder
		q.WriteString(`INSERT INTO webhook_deliveries (subscription_id, url, agent, event_id, event_type, event_at, job_id,
			idempotency_key, body, status, attempts, next_attempt_at, last_error, created_at, updated_at) VALUES `)
		args := make([]any, 0, 15*len(chunk))
		for i, d := range chunk {
			if !ASCIIID(d.URL) || !ASCIIID(d.JobID) || !ASCIIID(d.IdempotencyKey) {
				return fmt.Errorf("queue webhook deliveries: delivery %s: url, job id and key must be ASCII", d.IdempotencyKey)
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(row)
			args = append(args, d.SubscriptionID, d.URL, d.Agent, d.EventID, d.EventType, e.d.Time(d.EventAt), d.JobID,
				d.IdempotencyKey, string(d.Body), string(store.DeliveryPending), d.Attempts, e.d.Time(d.NextAttemptAt),
				TruncateUTF8(d.LastError, webhookErrorMax), e.d.Time(d.CreatedAt), e.d.Time(d.CreatedAt))
		}
		q.WriteString(" " + e.d.Upsert([]string{"idempotency_key"}, []string{"idempotency_key"}))
		if _, err := e.d.ExecCount(ctx, e.w, "queue webhook deliveries", q.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// WebhookDeliveriesDue returns the pending deliveries due at now that may go, oldest due first:
// callbacks, and those of active subscriptions not backing off. It reads each such endpoint's
// through idx_webhook_deliveries_sub_due (at most 100 subscriptions, a query each), so that the
// pending deliveries of an endpoint that may not be sent to now are never read.
func (e Executor) WebhookDeliveriesDue(ctx context.Context, now time.Time, limit int) ([]store.WebhookDelivery, error) {
	at := e.d.Time(now)
	limit = ClampLimit(limit, DispatchLimitDefault, DispatchLimitMax)
	subs, err := QueryColumn[string](ctx, e.d, e.r, `SELECT id FROM webhook_subscriptions
		WHERE status = ? AND (retry_at IS NULL OR retry_at <= ?) ORDER BY id`, string(store.WebhookActive), at)
	if err != nil {
		return nil, wrapErr("list due webhook deliveries", err)
	}
	var all []store.WebhookDelivery
	for _, sub := range append([]string{""}, subs...) {
		ds, err := query(ctx, e.d, e.r, e.d.scanDelivery, "SELECT "+deliveryColumns+` FROM webhook_deliveries
			WHERE subscription_id = ? AND status = ? AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?`,
			sub, string(store.DeliveryPending), at, limit)
		if err != nil {
			return nil, wrapErr("list due webhook deliveries", err)
		}
		all = append(all, ds...)
	}
	slices.SortFunc(all, func(a, b store.WebhookDelivery) int {
		return cmp.Or(a.NextAttemptAt.Compare(b.NextAttemptAt), cmp.Compare(a.ID, b.ID))
	})
	return all[:min(len(all), limit)], nil
}

// WebhookDeliveryRecord writes each record: a compare-and-set UPDATE of the delivery, and its
// attempt's row when the update applied.
func (e Executor) WebhookDeliveryRecord(ctx context.Context, rs []store.DeliveryRecord) ([]int64, error) {
	var wrote []int64
	for _, r := range rs {
		what := fmt.Sprintf("record webhook delivery %d", r.ID)
		var finished any
		if r.Status != store.DeliveryPending {
			finished = e.d.Time(r.Now)
		}
		a := r.Attempt
		msg := TruncateUTF8(a.Error, webhookErrorMax)
		n, err := e.d.ExecCount(ctx, e.w, what, `UPDATE webhook_deliveries SET status = ?, attempts = ?, next_attempt_at = ?,
			last_status_code = ?, last_error = ?, updated_at = ?, finished_at = ? WHERE id = ? AND status = ? AND attempts = ?`,
			string(r.Status), r.ExpectAttempts+1, e.d.Time(r.NextAttemptAt), a.StatusCode, msg, e.d.Time(r.Now), finished,
			r.ID, string(store.DeliveryPending), r.ExpectAttempts)
		if err != nil {
			return wrote, err
		}
		if n == 0 {
			continue // deleted with its subscription, or recorded already
		}
		if _, err := e.d.ExecCount(ctx, e.w, what, `INSERT INTO webhook_attempts (delivery_id, attempt, status_code, error,
			started_at, duration_us) VALUES (?, ?, ?, ?, ?, ?)`, r.ID, r.ExpectAttempts+1, a.StatusCode, msg,
			e.d.Time(a.StartedAt), a.Duration.Microseconds()); err != nil {
			return wrote, err
		}
		wrote = append(wrote, r.ID)
	}
	return wrote, nil
}

// WebhookDeliveryGet returns one delivery, with its body, or store.ErrNotFound.
func (e Executor) WebhookDeliveryGet(ctx context.Context, id int64) (store.WebhookDelivery, error) {
	d, err := e.d.scanDelivery(e.r.QueryRowContext(ctx, "SELECT "+deliveryColumns+" FROM webhook_deliveries WHERE id = ?", id))
	if err != nil {
		return d, fmt.Errorf("get webhook delivery %d: %w", id, e.d.MapErr(err))
	}
	return d, nil
}

// WebhookDeliveryList returns a page of a subscription's deliveries without their bodies,
// newest first (idx_webhook_deliveries_sub).
func (e Executor) WebhookDeliveryList(ctx context.Context, p store.DeliveryListParams) ([]store.WebhookDelivery, error) {
	f := filter{where: []string{"subscription_id = ?"}, args: []any{p.SubscriptionID}}
	if p.BeforeID > 0 {
		f.add("id < ?", p.BeforeID)
	}
	ds, err := query(ctx, e.d, e.r, e.d.scanDelivery, "SELECT "+deliveryColumnsNoBody+" FROM webhook_deliveries"+f.sql()+
		" ORDER BY id DESC LIMIT ?", append(f.args, ClampLimit(p.Limit, ListLimitDefault, ListLimitMax))...)
	return ds, wrapErr("list webhook deliveries", err)
}

// WebhookAttemptList returns the attempts of the deliveries among ids.
func (e Executor) WebhookAttemptList(ctx context.Context, ids []int64) ([]store.WebhookAttempt, error) {
	scan := func(row Scanner) (store.WebhookAttempt, error) {
		var (
			a  store.WebhookAttempt
			us int64
		)
		err := row.Scan(&a.DeliveryID, &a.Attempt, &a.StatusCode, &a.Error, e.d.at(&a.StartedAt), &us)
		a.Duration = time.Duration(us) * time.Microsecond
		return a, err
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	var out []store.WebhookAttempt
	for chunk := range slices.Chunk(ids, max(e.d.Chunk, 1)) {
		as, err := query(ctx, e.d, e.r, scan, `SELECT delivery_id, attempt, status_code, error, started_at, duration_us
			FROM webhook_attempts WHERE delivery_id IN (`+Placeholders(len(chunk))+") ORDER BY delivery_id, attempt", Args(chunk)...)
		if err != nil {
			return nil, fmt.Errorf("list webhook attempts: %w", err)
		}
		out = append(out, as...)
	}
	return out, nil
}

// WebhookDeliveryCounts counts the pending deliveries by subscription.
func (e Executor) WebhookDeliveryCounts(ctx context.Context) (map[string]int, error) {
	rows, err := e.r.QueryContext(ctx, `SELECT subscription_id, COUNT(*) FROM webhook_deliveries WHERE status = ?
		GROUP BY subscription_id`, string(store.DeliveryPending))
	if err != nil {
		return nil, fmt.Errorf("count webhook deliveries: %w", e.d.MapErr(err))
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			id string
			n  int
		)
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("count webhook deliveries: %w", err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count webhook deliveries: %w", e.d.MapErr(err))
	}
	return out, nil
}

// WebhookDeleteFinished deletes the oldest finished deliveries and their attempts, at most
// limit of them (idx_webhook_deliveries_finished).
func (e Executor) WebhookDeleteFinished(ctx context.Context, before time.Time, limit int) (int, error) {
	ids, err := QueryColumn[int64](ctx, e.d, e.w, `SELECT id FROM webhook_deliveries WHERE finished_at < ?
		ORDER BY finished_at LIMIT ?`, e.d.Time(before), MaintenanceLimit(limit))
	if err != nil || len(ids) == 0 {
		return 0, wrapErr("delete finished webhook deliveries", err)
	}
	in := " IN (" + Placeholders(len(ids)) + ")"
	if _, err := e.d.ExecCount(ctx, e.w, "delete webhook attempts", "DELETE FROM webhook_attempts WHERE delivery_id"+in,
		Args(ids)...); err != nil {
		return 0, err
	}
	return e.d.ExecCount(ctx, e.w, "delete finished webhook deliveries", "DELETE FROM webhook_deliveries WHERE id"+in,
		Args(ids)...)
}

// scanDelivery reads a row of deliveryColumns (or deliveryColumnsNoBody).
func (enc Encoding) scanDelivery(row Scanner) (store.WebhookDelivery, error) {
	var (
		d      store.WebhookDelivery
		body   []byte
		status string
	)
	err := row.Scan(&d.ID, &d.SubscriptionID, &d.URL, &d.Agent, &d.EventID, &d.EventType, enc.at(&d.EventAt), &d.JobID,
		&d.IdempotencyKey, &body, &status, &d.Attempts, enc.at(&d.NextAttemptAt), &d.LastStatusCode, &d.LastError,
		enc.at(&d.CreatedAt), enc.at(&d.UpdatedAt), enc.atPtr(&d.FinishedAt))
	d.Status, d.Body = store.DeliveryStatus(status), NilIfEmpty(body)
	return d, err
}
