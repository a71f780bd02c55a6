package webhooks

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
)

// Store is what the webhooks need of the store: the webhook tables, the audit trail, the
// jobs' webhook fields and transactions (store.Store has it all).
type Store interface {
	store.WebhookExecutor
	store.TxRunner
	AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEvent, error)
	AuditInsert(ctx context.Context, events []store.AuditEvent) error
}

// auditReadMax is the most audit rows one read returns (the store's list limit).
const auditReadMax = 1000

// tailBudget bounds one RunOnce behind a backlog: it reads batch after batch for about this
// long, then the loop's next pass goes on (a pass ends, so its context and the leadership are
// checked between them).
const tailBudget = 2 * time.Second

// TailerConfig configures a Tailer.
type TailerConfig struct {
	// Interval between passes (± 10%); default config.WebhooksIntervalDefault.
	Interval time.Duration
	// Batch is the most audit rows one read takes (default config.WebhooksBatchDefault, at
	// most 1000).
	Batch int
	// GapWindow is how long a missing audit id is looked for (config.WebhooksGapWindowDefault).
	GapWindow time.Duration
	// MaxGaps bounds the open gaps (MaxGapsDefault).
	MaxGaps int
	// MaxBodyBytes caps a delivery's body (config.WebhooksMaxBodyBytesDefault).
	MaxBodyBytes int
	// Fence guards every write of a leader (nil: none).
	Fence store.Fence
	// Queued is called after a pass queued deliveries (the sender's wake-up); nil: nothing.
	Queued func()
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
	// Clock is the time source (default time.Now).
	Clock func() time.Time
	// Metrics counts the gaps (nil: nothing counted).
	Metrics *Metrics
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// TailerConfigFrom fills cfg's zero fields from the webhooks configuration.
func TailerConfigFrom(c *config.Config, cfg TailerConfig) TailerConfig {
	w := c.Webhooks
	cfg.Interval = cmp.Or(cfg.Interval, w.Interval)
	cfg.Batch = cmp.Or(cfg.Batch, w.Batch)
	cfg.GapWindow = cmp.Or(cfg.GapWindow, w.GapWindow)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, w.MaxBodyBytes)
	return cfg
}

// TailResult says what one RunOnce did.
type TailResult struct {
	Read     int // audit rows read (new ones, and gaps that committed)
	Queued   int // deliveries queued
	Gaps     int // gaps open at the end
	GivenUp  int // gaps given up
	LateRows int // rows found in gaps: committed after a higher id was read
}

// Tailer is the leader loop that turns audit rows into deliveries (the package's comment).
type Tailer struct {
	startstop.Base
	st  Store
	cfg TailerConfig
	log *slog.Logger
}

// NewTailer returns a Tailer over st.
func NewTailer(st Store, cfg TailerConfig) *Tailer {
	cfg.Interval = cmp.Or(cfg.Interval, config.WebhooksIntervalDefault)
	cfg.Batch = min(cmp.Or(cfg.Batch, config.WebhooksBatchDefault), auditReadMax)
	cfg.GapWindow = cmp.Or(cfg.GapWindow, config.WebhooksGapWindowDefault)
	cfg.MaxGaps = cmp.Or(cfg.MaxGaps, MaxGapsDefault)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, config.WebhooksMaxBodyBytesDefault)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Tailer{st: st, cfg: cfg, log: logging.Component(cfg.Logger, "webhook-tail")}
}

// Start runs the tailer until ctx ends or Stop is called. It returns at once.
func (t *Tailer) Start(ctx context.Context) error {
	return t.StartLoop(ctx, startstop.Every(t.cfg.Interval, t.cfg.Stagger, nil, t.log),
		startstop.Pass(t.RunOnce))
}

// RunOnce reads the audit trail after the cursor, queues the deliveries of its events and
// moves the cursor, batch after batch until it has caught up (or for about tailBudget).
func (t *Tailer) RunOnce(ctx context.Context) (TailResult, error) {
	var total TailResult
	for start := time.Now(); ; {
		res, full, err := t.pass(ctx)
		total.Read, total.Queued, total.GivenUp = total.Read+res.Read, total.Queued+res.Queued, total.GivenUp+res.GivenUp
		total.LateRows += res.LateRows
		total.Gaps = res.Gaps
		if err != nil || !full || time.Since(start) > tailBudget {
			return total, err
		}
	}
}

// pass is one batch: read, plan, and commit the cursor with the deliveries.
func (t *Tailer) pass(ctx context.Context) (res TailResult, full bool, err error) {
	now := t.cfg.Clock().UTC()
	cur, err := t.st.WebhookCursorGet(ctx)
	if err != nil {
		return res, false, err
	}
	rows, err := t.st.AuditList(ctx, store.AuditListParams{AfterID: cur.LastID, Limit: t.cfg.Batch})
	if err != nil {
		return res, false, fmt.Errorf("read the audit trail: %w", err)
	}
	var found []store.AuditEvent
	if len(cur.Gaps) > 0 {
		if found, err = t.st.AuditGetMany(ctx, gapIDs(cur.Gaps)); err != nil {
			return res, false, fmt.Errorf("read the audit trail's gaps: %w", err)
		}
	}
	next, givenUp := advance(cur, rows, found, now, t.cfg.GapWindow, t.cfg.MaxGaps)
	res = TailResult{Read: len(rows) + len(found), Gaps: len(next.Gaps), GivenUp: givenUp, LateRows: len(found)}
	full = len(rows) == t.cfg.Batch
	if sameCursor(cur, next) {
		return res, full, nil
	}
	events := slices.Concat(found, rows)
	slices.SortFunc(events, func(a, b store.AuditEvent) int { return cmp.Compare(a.ID, b.ID) })
	ds, err := t.plan(ctx, events, now)
	if err != nil {
		return res, false, err
	}
	err = store.WithFence(ctx, t.st, t.cfg.Fence, func(tx store.Tx) error {
		if err := tx.WebhookCursorSet(ctx, next, cur.Version, now); err != nil {
			return err
		}
		if len(ds) == 0 {
			return nil
		}
		return tx.WebhookDeliveryInsert(ctx, ds)
	})
	if err != nil {
		return res, false, fmt.Errorf("queue webhook deliveries: %w", err)
	}
	res.Queued = len(ds)
	t.cfg.Metrics.tailed(res)
	if givenUp > 0 {
		t.log.Info("gave up audit ids that never committed (rolled back, most likely)", "gaps", givenUp,
			"window", t.cfg.GapWindow)
	}
	if len(ds) > 0 && t.cfg.Queued != nil {
		t.cfg.Queued()
	}
	return res, full, nil
}

// plan reads what the events' deliveries need (the active subscriptions, the events' jobs)
// and returns the deliveries.
func (t *Tailer) plan(ctx context.Context, events []store.AuditEvent, now time.Time) ([]store.WebhookDelivery, error) {
	subs, err := t.st.WebhookList(ctx)
	if err != nil {
		return nil, err
	}
	subs = slices.DeleteFunc(subs, func(s store.WebhookSubscription) bool { return s.Status != store.WebhookActive })
	// The jobs are read for the events some subscription lists and for those that end a job
	// with a callback (their row says so), not for every job event of the trail: at a
	// thousand jobs a second, a read of each job would cost MariaDB more than its audit rows.
	wanted := map[string]bool{}
	for _, s := range subs {
		for _, name := range s.Events {
			wanted[name] = true
		}
	}
	var ids []string
	for _, ev := range events {
		if name, ok := EventOf(ev.EventType); ok && ev.JobID != "" && (wanted[name] || (Terminal(name) && hasCallback(ev))) {
			ids = append(ids, ev.JobID)
		}
	}
	p := &planner{subs: subs, jobs: map[string]store.WebhookJob{}, maxBody: t.cfg.MaxBodyBytes, now: now,
		failed: map[string]json.RawMessage{}}
	if len(ids) > 0 {
		jobs, err := t.st.WebhookJobs(ctx, ids, t.cfg.MaxBodyBytes/2)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			p.jobs[j.ID] = j
		}
	}
	return p.plan(events)
}

// hasCallback reports whether ev, a row that ends a job, says that its job has a callback_url
// (store.AuditDetailCallback).
func hasCallback(ev store.AuditEvent) bool {
	var d struct {
		Callback bool `json:"callback"`
	}
	return bytes.Contains(ev.Details, []byte(`"`+store.AuditDetailCallback+`"`)) && json.Unmarshal(ev.Details, &d) == nil && d.Callback
}
