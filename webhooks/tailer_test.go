package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/webhooks"
	"github.com/gpuorch/orchestrator/wire"
)

func TestEventOf(t *testing.T) {
	t.Parallel()
	for audit, want := range map[string]string{
		"job.submitted":             webhooks.EventJobSubmitted,
		"job.claimed->running":      webhooks.EventJobStarted,
		"job.running->done":         webhooks.EventJobDone,
		"job.failed->pending":       webhooks.EventJobFailed,
		"job.failed->dead_letter":   webhooks.EventJobDeadLetter,
		"job.pending->cancelled":    webhooks.EventJobCancelled,
		"job.running->cancelled":    webhooks.EventJobCancelled,
		"job.dead_letter->pending":  webhooks.EventJobReplayed,
		"schedule.fired":            webhooks.EventScheduleFired,
		"schedule.skipped":          webhooks.EventScheduleSkipped,
		"webhook.disabled":          webhooks.EventWebhookDisabled,
		"job.pending->claimed":      "",
		"job.running->failed":       "",
		"job.claimed->pending":      "",
		"job.placed":                "",
		"lease.expired":             "",
		"pool.starting->running":    "",
		"webhook.created":           "",
		"admission.policy_set":      "",
		"node.cordoned":             "",
		"job.model_unserved":        "",
		"not.a.job->done":           "",
		"jobs.something->cancelled": "",
	} {
		got, ok := webhooks.EventOf(audit)
		require.Equal(t, want != "", ok, audit)
		require.Equal(t, want, got, audit)
	}
	for _, e := range webhooks.Events {
		require.True(t, webhooks.Known(e))
	}
	require.False(t, webhooks.Known(webhooks.EventPreRun), "no subscription receives pre-run calls")
}

// TestTailEvents: which endpoints an event goes to (the subscription's events and filter, the
// job's callback for its terminal events), and what its body says.
func TestTailEvents(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		rec := newReceiver(t, func(int) int { return http.StatusOK })
		all := b.subscribe(t, rec.URL+"/all", webhooks.Events...)
		mine, err := b.svc.Create(t.Context(), webhooks.CreateParams{URL: rec.URL + "/mine", FilterAgent: "other",
			Events: []string{webhooks.EventJobDone, webhooks.EventScheduleSkipped}})
		require.NoError(t, err)

		hooked := b.job(t, rec.URL+"/cb")
		b.event(t, hooked, "job.submitted", `{"agent":"ag","max_attempts":3,"type":"noop"}`)
		b.event(t, hooked, "job.pending->claimed", "")
		b.event(t, hooked, "job.claimed->running", "")
		b.event(t, hooked, "job.running->failed", `{"attempt":1,"error":"boom","non_retryable":false}`)
		b.event(t, hooked, "job.failed->pending", `{"retry_in_ms":1000,"next_attempt":2}`)
		b.event(t, hooked, "job.running->failed", `{"attempt":2,"error":"boom again","non_retryable":true}`)
		b.event(t, hooked, "job.failed->dead_letter", `{"reason":"non-retryable error","attempts":2}`)
		b.event(t, "", "schedule.skipped", `{"schedule_id":"s1","fire_time":"2030-01-01T00:00:00Z","reason":"overlap","agent":"other"}`)
		res := b.tailOnce(t)
		require.Equal(t, 10, res.Read, "eight rows and the two webhook.created")
		// all: submitted, started, failed, dead_letter, skipped; mine: skipped (its agent);
		// the callback: dead_letter only.
		require.Equal(t, 7, res.Queued)

		require.Equal(t, 7, b.sendOnce(t).Delivered)
		bodies := map[string]map[string]json.RawMessage{} // path → event type → data
		for _, r := range rec.requests() {
			var ev wire.WebhookEvent
			require.NoError(t, json.Unmarshal(r.body, &ev))
			require.Equal(t, ev.Type, r.event)
			path := strings.TrimPrefix(r.key[strings.Index(r.key, "-")+1:], "")
			if bodies[path] == nil {
				bodies[path] = map[string]json.RawMessage{}
			}
			bodies[path][ev.Type] = ev.Data
		}
		require.Len(t, bodies[all.ID], 5)
		require.Len(t, bodies[mine.ID], 1)
		require.Contains(t, bodies[mine.ID], webhooks.EventScheduleSkipped)
		require.Len(t, bodies["callback"], 1)
		require.Contains(t, bodies["callback"], webhooks.EventJobDeadLetter)

		var failed, dead wire.WebhookJobData
		require.NoError(t, json.Unmarshal(bodies[all.ID][webhooks.EventJobFailed], &failed))
		require.Equal(t, "boom", failed.Error, "the error of the failed row that came with it")
		require.Equal(t, 1, failed.Attempt)
		require.Equal(t, "pending", failed.Status)
		require.NoError(t, json.Unmarshal(bodies["callback"][webhooks.EventJobDeadLetter], &dead))
		require.Equal(t, "boom again", dead.Error)
		require.Equal(t, 2, dead.Attempt)
		require.Equal(t, "dead_letter", dead.Status)
		require.Equal(t, "ag", dead.Agent)
		require.JSONEq(t, `{"schedule_id":"s1","fire_time":"2030-01-01T00:00:00Z","reason":"overlap","agent":"other"}`,
			string(bodies[all.ID][webhooks.EventScheduleSkipped]), "a schedule event's data are its details")

		// A done job's result rides along when it fits the body, and is said to be left out
		// when it does not.
		small, big := b.job(t, rec.URL+"/small"), b.job(t, rec.URL+"/big")
		for id, result := range map[string]string{small: `{"answer":42}`, big: `"` + strings.Repeat("x", b.cfg.Webhooks.MaxBodyBytes) + `"`} {
			require.NoError(t, b.st.JobUpdate(t.Context(), store.JobUpdate{ID: id, From: store.JobPending, To: store.JobDone,
				Result: json.RawMessage(result), Now: b.clock.Now()}))
			b.event(t, id, "job.running->done", "")
		}
		require.Equal(t, 4, b.tailOnce(t).Queued, "all and the callback of each")
		require.Equal(t, 4, b.sendOnce(t).Delivered)
		for _, r := range rec.requests()[7:] {
			require.LessOrEqual(t, len(r.body), b.cfg.Webhooks.MaxBodyBytes)
			var ev wire.WebhookEvent
			require.NoError(t, json.Unmarshal(r.body, &ev))
			var d wire.WebhookJobData
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			if d.JobID == small {
				require.JSONEq(t, `{"answer":42}`, string(d.Result))
				require.False(t, d.ResultOmitted)
			} else {
				require.Nil(t, d.Result)
				require.True(t, d.ResultOmitted)
			}
		}
	})
}

// TestTailLateCommit: an audit id whose transaction commits after a higher id was read is
// not skipped: the tail keeps it as a gap in its cursor and queues its event once it commits;
// an id that never commits (a rollback) is given up after the gap window. MariaDB only: SQLite
// has one writer, whose ids commit in order.
func TestTailLateCommit(t *testing.T) {
	t.Parallel()
	b := setupMariaDB(t)
	rec := newReceiver(t, func(int) int { return http.StatusOK })
	ctx := t.Context()
	early, late := b.job(t, rec.URL+"/early"), b.job(t, rec.URL+"/late")
	b.tailOnce(t)

	// A transaction takes an id and holds it open across a pass of the tail.
	inserted, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- b.st.WithTx(context.Background(), func(tx store.Tx) error {
			if err := tx.AuditInsert(ctx, []store.AuditEvent{b.row(t, early, "job.running->done", "")}); err != nil {
				return err
			}
			if err := tx.Flush(ctx); err != nil { // the INSERT runs now: its id is taken
				return err
			}
			close(inserted)
			<-release
			return nil
		})
	}()
	<-inserted
	b.event(t, late, "job.running->done", "") // a higher id, committed first

	res := b.tailOnce(t)
	require.Equal(t, 1, res.Queued, "the late job's callback")
	require.Equal(t, 1, res.Gaps, "the early job's id, not committed yet")
	cur, err := b.st.WebhookCursorGet(ctx)
	require.NoError(t, err)
	require.Len(t, cur.Gaps, 1)
	require.Less(t, cur.Gaps[0].ID, cur.LastID)
	require.Zero(t, b.tailOnce(t).Queued, "still open: nothing new")

	close(release)
	require.NoError(t, <-done)
	res = b.tailOnce(t)
	require.Equal(t, 1, res.Queued, "the early job's callback, once its row committed")
	require.Equal(t, 1, res.LateRows)
	require.Zero(t, res.Gaps)
	require.Equal(t, 2, b.sendOnce(t).Delivered)
	paths := map[string]bool{}
	for _, r := range rec.requests() {
		var ev wire.WebhookEvent
		require.NoError(t, json.Unmarshal(r.body, &ev))
		var d wire.WebhookJobData
		require.NoError(t, json.Unmarshal(ev.Data, &d))
		paths[d.JobID] = true
	}
	require.Equal(t, map[string]bool{early: true, late: true}, paths)

	// A rolled-back id stays a gap for the window, then is given up.
	errRollback := errors.New("roll back")
	require.ErrorIs(t, b.st.WithTx(ctx, func(tx store.Tx) error {
		if err := tx.AuditInsert(ctx, []store.AuditEvent{b.row(t, early, "job.running->done", "")}); err != nil {
			return err
		}
		if err := tx.Flush(ctx); err != nil {
			return err
		}
		return errRollback
	}), errRollback)
	b.event(t, late, "job.running->cancelled", "")
	res = b.tailOnce(t)
	require.Equal(t, 1, res.Gaps)
	b.clock.Add(b.cfg.Webhooks.GapWindow - time.Second)
	require.Equal(t, 1, b.tailOnce(t).Gaps, "still within the window")
	b.clock.Add(2 * time.Second)
	res = b.tailOnce(t)
	require.Zero(t, res.Gaps)
	require.Equal(t, 1, res.GivenUp)
}
