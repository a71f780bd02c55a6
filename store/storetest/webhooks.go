package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testWebhooks runs the conformance tests of the webhook tables.
func testWebhooks(t *testing.T, parent *bundle) {
	runAll(t, parent.s, []subtest{
		{"Subscriptions", testWebhookSubscriptions},
		{"Deliveries", testWebhookDeliveries},
		{"Cursor", testWebhookCursor},
		{"AuditAndJobs", testWebhookAuditAndJobs},
	})
}

// webhook is a subscription of the subtest.
func (b *bundle) webhook(name string) store.WebhookSubscription {
	return store.WebhookSubscription{
		ID: b.prefix + name, URL: "https://hooks.example.com/" + b.prefix + name, Events: []string{"job.done", "job.failed"},
		FilterType: "noop", Secret: "s3cret-" + name, Status: store.WebhookActive, CreatedBy: "admin:test",
		CreatedAt: b.now, UpdatedAt: b.now,
	}
}

// delivery is a pending delivery of the subtest, due at due.
func (b *bundle) delivery(sub string, event int64, due time.Time) store.WebhookDelivery {
	target := sub
	if sub == store.DeliveryCallback {
		target = b.prefix + "callback"
	}
	return store.WebhookDelivery{
		SubscriptionID: sub, URL: "https://hooks.example.com/x", Agent: b.agent(), EventID: event, EventType: "job.done",
		EventAt: b.now, JobID: b.id("job"), IdempotencyKey: fmt.Sprintf("%d-%s", event, target),
		Body: json.RawMessage(`{"id":"evt"}`), NextAttemptAt: due, CreatedAt: b.now,
	}
}

// ofSubtest keeps the deliveries whose idempotency key names the subtest.
func (b *bundle) deliveriesOfSubtest(ds []store.WebhookDelivery) []store.WebhookDelivery {
	return slices.DeleteFunc(slices.Clone(ds), func(d store.WebhookDelivery) bool {
		return !strings.Contains(d.IdempotencyKey, b.prefix)
	})
}

func testWebhookSubscriptions(t *testing.T, b *bundle) {
	ctx := t.Context()
	s := b.webhook("a")
	require.NoError(t, b.s.WebhookInsert(ctx, s))
	require.ErrorIs(t, b.s.WebhookInsert(ctx, s), store.ErrConflict)
	require.NoError(t, b.s.WebhookInsert(ctx, b.webhook("b")))

	got, err := b.s.WebhookGet(ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, s.URL, got.URL)
	require.Equal(t, []string{"job.done", "job.failed"}, got.Events)
	require.Equal(t, "noop", got.FilterType)
	require.Empty(t, got.FilterAgent)
	require.Equal(t, s.Secret, got.Secret)
	require.Equal(t, store.WebhookActive, got.Status)
	require.True(t, got.RetryAt.IsZero())
	require.Nil(t, got.DisabledAt)
	requireTime(t, b.now, got.CreatedAt)
	_, err = b.s.WebhookGet(ctx, b.prefix+"missing")
	require.ErrorIs(t, err, store.ErrNotFound)

	all, err := b.s.WebhookList(ctx)
	require.NoError(t, err)
	var mine []string
	for _, w := range all {
		if strings.HasPrefix(w.ID, b.prefix) {
			mine = append(mine, w.ID)
		}
	}
	require.Equal(t, []string{b.prefix + "a", b.prefix + "b"}, mine)

	// Failures back it off; disabling records why and when.
	retry := b.now.Add(time.Minute)
	require.NoError(t, b.s.WebhookSetState(ctx, s.ID, store.WebhookState{Status: store.WebhookActive,
		ConsecutiveFailures: 2, RetryAt: retry, Now: b.now}))
	got, err = b.s.WebhookGet(ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, 2, got.ConsecutiveFailures)
	requireTime(t, retry, got.RetryAt)
	off := b.now.Add(2 * time.Minute)
	require.NoError(t, b.s.WebhookSetState(ctx, s.ID, store.WebhookState{Status: store.WebhookDisabled,
		ConsecutiveFailures: 3, DisabledReason: "3 failures in a row", DisabledAt: &off, Now: off}))
	// Enabling again keeps the record of the last disabling.
	require.NoError(t, b.s.WebhookSetState(ctx, s.ID, store.WebhookState{Status: store.WebhookActive, Now: off}))
	got, err = b.s.WebhookGet(ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, store.WebhookActive, got.Status)
	require.Zero(t, got.ConsecutiveFailures)
	require.True(t, got.RetryAt.IsZero())
	require.Equal(t, "3 failures in a row", got.DisabledReason)
	requireTimePtr(t, &off, got.DisabledAt)
	require.ErrorIs(t, b.s.WebhookSetState(ctx, b.prefix+"missing", store.WebhookState{Status: store.WebhookActive, Now: off}),
		store.ErrNotFound)
	// A write guarded by a status the row no longer has changes nothing.
	require.ErrorIs(t, b.s.WebhookSetState(ctx, s.ID, store.WebhookState{From: store.WebhookDisabled, Status: store.WebhookActive,
		ConsecutiveFailures: 9, Now: off}), store.ErrNotFound)
	got, err = b.s.WebhookGet(ctx, s.ID)
	require.NoError(t, err)
	require.Zero(t, got.ConsecutiveFailures)

	// Deleting a subscription deletes its deliveries and their attempts.
	later := b.now.AddDate(1, 0, 0) // never due for the other subtests
	require.NoError(t, b.s.WebhookDeliveryInsert(ctx, []store.WebhookDelivery{b.delivery(s.ID, 1, later)}))
	page, err := b.s.WebhookDeliveryList(ctx, store.DeliveryListParams{SubscriptionID: s.ID})
	require.NoError(t, err)
	require.Len(t, page, 1)
	wrote, err := b.s.WebhookDeliveryRecord(ctx, []store.DeliveryRecord{{ID: page[0].ID, Status: store.DeliveryPending,
		NextAttemptAt: later, Attempt: store.WebhookAttempt{StatusCode: 500, StartedAt: b.now}, Now: b.now}})
	require.NoError(t, err)
	require.Equal(t, []int64{page[0].ID}, wrote)
	require.NoError(t, b.s.WebhookDelete(ctx, s.ID))
	require.ErrorIs(t, b.s.WebhookDelete(ctx, s.ID), store.ErrNotFound)
	_, err = b.s.WebhookDeliveryGet(ctx, page[0].ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	attempts, err := b.s.WebhookAttemptList(ctx, []int64{page[0].ID})
	require.NoError(t, err)
	require.Empty(t, attempts)
}

func testWebhookDeliveries(t *testing.T, b *bundle) {
	ctx := t.Context()
	active, off, backing := b.webhook("active"), b.webhook("off"), b.webhook("backing")
	off.Status = store.WebhookDisabled
	backing.ConsecutiveFailures, backing.RetryAt = 1, b.now.Add(time.Hour)
	for _, s := range []store.WebhookSubscription{active, off, backing} {
		require.NoError(t, b.s.WebhookInsert(ctx, s))
	}
	queued := []store.WebhookDelivery{
		b.delivery(active.ID, 10, b.now.Add(-time.Second)),
		b.delivery(store.DeliveryCallback, 10, b.now.Add(-2*time.Second)),
		b.delivery(off.ID, 10, b.now.Add(-time.Second)),
		b.delivery(backing.ID, 10, b.now.Add(-time.Second)),
		b.delivery(active.ID, 11, b.now.Add(time.Second)), // not due
	}
	require.NoError(t, b.s.WebhookDeliveryInsert(ctx, queued))
	// The same event for the same endpoint again changes nothing.
	again := b.delivery(active.ID, 10, b.now.Add(time.Hour))
	again.Body = json.RawMessage(`{"id":"other"}`)
	require.NoError(t, b.s.WebhookDeliveryInsert(ctx, []store.WebhookDelivery{again}))

	due, err := b.s.WebhookDeliveriesDue(ctx, b.now, 1000)
	require.NoError(t, err)
	due = b.deliveriesOfSubtest(due)
	require.Len(t, due, 2, "the callback and the active subscription's: not the disabled one's, not the one backing off")
	require.Equal(t, store.DeliveryCallback, due[0].SubscriptionID, "oldest due first")
	require.Equal(t, active.ID, due[1].SubscriptionID)
	d := due[1]
	require.JSONEq(t, `{"id":"evt"}`, string(d.Body))
	require.Equal(t, store.DeliveryPending, d.Status)
	require.Equal(t, b.agent(), d.Agent)
	require.Equal(t, int64(10), d.EventID)
	require.Equal(t, b.id("job"), d.JobID)
	requireTime(t, b.now, d.EventAt)
	require.Nil(t, d.FinishedAt)

	// The endpoint's backoff over, its deliveries are due again.
	due, err = b.s.WebhookDeliveriesDue(ctx, b.now.Add(2*time.Hour), 1000)
	require.NoError(t, err)
	require.Len(t, b.deliveriesOfSubtest(due), 4)

	// Two failed attempts and a success; a stale record is skipped.
	rec := func(attempts int, status store.DeliveryStatus, code int, msg string, at time.Time) store.DeliveryRecord {
		return store.DeliveryRecord{ID: d.ID, ExpectAttempts: attempts, Status: status, NextAttemptAt: at.Add(time.Second),
			Attempt: store.WebhookAttempt{StatusCode: code, Error: msg, StartedAt: at, Duration: 1500 * time.Microsecond}, Now: at}
	}
	for i, r := range []store.DeliveryRecord{
		rec(0, store.DeliveryPending, 503, "HTTP 503", b.now),
		rec(1, store.DeliveryPending, 0, "connection refused", b.now.Add(time.Second)),
		rec(2, store.DeliveryDelivered, 200, "", b.now.Add(2*time.Second)),
	} {
		wrote, err := b.s.WebhookDeliveryRecord(ctx, []store.DeliveryRecord{r})
		require.NoError(t, err)
		require.Equal(t, []int64{d.ID}, wrote, "record %d", i)
	}
	wrote, err := b.s.WebhookDeliveryRecord(ctx, []store.DeliveryRecord{rec(2, store.DeliveryPending, 500, "late", b.now)})
	require.NoError(t, err)
	require.Empty(t, wrote, "a record of an attempt count that moved on is skipped")
	got, err := b.s.WebhookDeliveryGet(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, got.Status)
	require.Equal(t, 3, got.Attempts)
	require.Equal(t, 200, got.LastStatusCode)
	require.Empty(t, got.LastError)
	requireTimePtr(t, ptrTo(b.now.Add(2*time.Second)), got.FinishedAt)
	attempts, err := b.s.WebhookAttemptList(ctx, []int64{d.ID})
	require.NoError(t, err)
	require.Len(t, attempts, 3)
	require.Equal(t, []int{503, 0, 200}, []int{attempts[0].StatusCode, attempts[1].StatusCode, attempts[2].StatusCode})
	require.Equal(t, "connection refused", attempts[1].Error)
	require.Equal(t, 2, attempts[1].Attempt)
	require.Equal(t, 1500*time.Microsecond, attempts[0].Duration)

	// A subscription's deliveries, newest first, by keyset pages.
	var ids []int64
	for before := int64(0); ; {
		page, err := b.s.WebhookDeliveryList(ctx, store.DeliveryListParams{SubscriptionID: active.ID, BeforeID: before, Limit: 1})
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		require.Nil(t, page[0].Body, "listings leave the body out")
		ids = append(ids, page[0].ID)
		before = page[0].ID
	}
	require.Len(t, ids, 2)
	require.Greater(t, ids[0], ids[1])

	counts, err := b.s.WebhookDeliveryCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, counts[active.ID], "the delivered one is not pending")
	require.Equal(t, 1, counts[off.ID])

	// Finished deliveries are deleted after their retention, with their attempts.
	n, err := b.s.WebhookDeleteFinished(ctx, b.now.Add(3*time.Second), 5000)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	_, err = b.s.WebhookDeliveryGet(ctx, d.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	attempts, err = b.s.WebhookAttemptList(ctx, []int64{d.ID})
	require.NoError(t, err)
	require.Empty(t, attempts)
}

func ptrTo[T any](v T) *T { return &v }

func testWebhookCursor(t *testing.T, b *bundle) {
	ctx := t.Context()
	c, err := b.s.WebhookCursorGet(ctx)
	require.NoError(t, err)
	want := store.WebhookCursor{LastID: c.LastID + 5, Gaps: []store.WebhookGap{{ID: c.LastID + 2, FirstSeen: b.now}}}
	require.NoError(t, b.s.WebhookCursorSet(ctx, want, c.Version, b.now))
	require.ErrorIs(t, b.s.WebhookCursorSet(ctx, want, c.Version, b.now), store.ErrConflict, "the version moved on")
	got, err := b.s.WebhookCursorGet(ctx)
	require.NoError(t, err)
	require.Equal(t, c.Version+1, got.Version)
	require.Equal(t, want.LastID, got.LastID)
	require.Len(t, got.Gaps, 1)
	require.Equal(t, want.Gaps[0].ID, got.Gaps[0].ID)
	requireTime(t, b.now, got.Gaps[0].FirstSeen)

	// Inside a transaction, as the tail writes it with its deliveries; concurrent writers of
	// one version: one wins.
	var (
		wg   sync.WaitGroup
		errs [4]error
	)
	for i := range errs {
		wg.Go(func() {
			errs[i] = b.s.WithTx(ctx, func(tx store.Tx) error {
				return tx.WebhookCursorSet(ctx, store.WebhookCursor{LastID: got.LastID + int64(i)}, got.Version, b.now)
			})
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			require.ErrorIs(t, err, store.ErrConflict)
		}
	}
	require.Equal(t, 1, won)
	got, err = b.s.WebhookCursorGet(ctx)
	require.NoError(t, err)
	require.Empty(t, got.Gaps)
	require.Equal(t, c.Version+2, got.Version)
}

func testWebhookAuditAndJobs(t *testing.T, b *bundle) {
	ctx := t.Context()
	hooked := b.insert(t, "hooked", func(p *store.JobInsertParams) { p.CallbackURL = "https://hooks.example.com/cb?x=1" })
	require.Equal(t, "https://hooks.example.com/cb?x=1", hooked.CallbackURL)
	require.Equal(t, hooked.CallbackURL, b.get(t, hooked.ID).CallbackURL, "read back")
	plain := b.insert(t, "plain")
	require.Empty(t, b.get(t, plain.ID).CallbackURL)
	many, err := b.s.JobInsertMany(ctx, []store.JobInsertParams{func() store.JobInsertParams {
		p := b.params("many")
		p.CallbackURL = "http://10.0.0.1/cb"
		return p
	}()})
	require.NoError(t, err)
	require.Equal(t, "http://10.0.0.1/cb", b.get(t, many[0].ID).CallbackURL)

	require.NoError(t, b.s.JobUpdate(ctx, store.JobUpdate{ID: hooked.ID, From: store.JobPending, To: store.JobDone,
		Result: json.RawMessage(`{"answer":"ü"}`), Now: b.now}))
	require.NoError(t, b.s.JobUpdate(ctx, store.JobUpdate{ID: plain.ID, From: store.JobPending, To: store.JobDone,
		Result: json.RawMessage(`{"big":"` + strings.Repeat("x", 100) + `"}`), Now: b.now}))
	jobs, err := b.s.WebhookJobs(ctx, []string{hooked.ID, plain.ID, b.id("missing"), "nön-ascii"}, 50)
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	slices.SortFunc(jobs, func(x, y store.WebhookJob) int { return strings.Compare(x.ID, y.ID) })
	h, p := jobs[0], jobs[1]
	require.Equal(t, hooked.ID, h.ID)
	require.Equal(t, "noop", h.Type)
	require.Equal(t, b.agent(), h.Agent)
	require.Equal(t, store.JobDone, h.Status)
	require.Equal(t, 3, h.MaxAttempts)
	require.Equal(t, hooked.CallbackURL, h.CallbackURL)
	require.JSONEq(t, `{"answer":"ü"}`, string(h.Result))
	require.Equal(t, len(`{"answer":"ü"}`), h.ResultBytes, "bytes, not characters")
	require.Nil(t, p.Result, "over the cap: left out")
	require.Equal(t, 110, p.ResultBytes)

	// The audit rows the tail reads again by id.
	require.NoError(t, b.s.AuditInsert(ctx, []store.AuditEvent{
		{TS: b.now, EventType: "job.running->done", JobID: hooked.ID, Actor: "worker:w"},
		{TS: b.now, EventType: "job.submitted", JobID: plain.ID, Actor: "agent:a", Details: json.RawMessage(`{"a":1}`)},
	}))
	evs, err := b.s.AuditList(ctx, store.AuditListParams{JobID: hooked.ID})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	evs2, err := b.s.AuditList(ctx, store.AuditListParams{JobID: plain.ID})
	require.NoError(t, err)
	require.Len(t, evs2, 1)
	got, err := b.s.AuditGetMany(ctx, []int64{evs2[0].ID, evs[0].ID, evs[0].ID, -1})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, evs[0].ID, got[0].ID, "by id")
	require.Equal(t, evs[0], got[0])
	require.Equal(t, evs2[0], got[1])
}
