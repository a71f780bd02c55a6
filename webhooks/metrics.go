package webhooks

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// Delivery kinds (label kind): to a subscription, or to a job's callback_url.
const (
	kindSubscription = "subscription"
	kindCallback     = "callback"
)

// Attempt results (label result of gpu_orchestrator_webhook_attempts_total).
const (
	resultOK        = "ok"         // a 2xx
	resultHTTPError = "http_error" // an answer that is not a 2xx
	resultError     = "error"      // no answer: refused, timed out, TLS, DNS
	resultBlocked   = "blocked"    // the address dialled is not public (webhooks.allow_private)
	resultUnsigned  = "unsigned"   // a callback without webhooks.callback_secret: not sent
)

// Final results of a delivery (label result of gpu_orchestrator_webhook_deliveries_total).
const (
	finalDelivered = "delivered"
	finalGivenUp   = "given_up"
)

// lagBuckets are the buckets of the delivery lag, from the event to its delivery: from 100 ms
// to a day (the longest a delivery retries by default).
var lagBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600, 4 * 3600, 24 * 3600}

// Metrics are the webhooks' event metrics. The leader counts deliveries and the tail's gaps;
// every instance counts the pre-run calls it makes: aggregate with sum.
type Metrics struct {
	metrics.Set
	attempts    *prometheus.CounterVec
	deliveries  *prometheus.CounterVec
	lag         *prometheus.HistogramVec
	disabled    prometheus.Counter
	gapsGivenUp prometheus.Counter
	lateRows    prometheus.Counter
	preRun      *prometheus.CounterVec
}

// NewMetrics returns unregistered webhook metrics, every series pre-created.
func NewMetrics() *Metrics {
	m := &Metrics{
		attempts: metrics.NewCounterVec("webhook_attempts_total",
			"Delivery attempts, by kind (subscription, callback) and result (ok, http_error, error, blocked, unsigned).",
			"kind", "result"),
		deliveries: metrics.NewCounterVec("webhook_deliveries_total",
			"Deliveries that ended, by kind and result (delivered, given_up after webhooks.max_attempts).", "kind", "result"),
		lag: metrics.NewHistogramVec("webhook_delivery_lag_seconds",
			"From an event to its delivery's success, by kind.", lagBuckets, "kind"),
		disabled: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "webhook_endpoints_disabled_total",
			Help: "Endpoints disabled after webhooks.max_consecutive_failures failed attempts in a row."}),
		gapsGivenUp: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "webhook_audit_gaps_given_up_total",
			Help: "Audit ids the webhook tail gave up after webhooks.gap_window (rolled back, most likely)."}),
		lateRows: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "webhook_audit_late_rows_total",
			Help: "Audit rows the webhook tail found in a gap: committed after a higher id was read."}),
		preRun: metrics.NewCounterVec("webhook_pre_run_total",
			"Pre-run hook calls, by decision (run, fail, retry).", "decision"),
	}
	m.Set = metrics.Set{m.attempts, m.deliveries, m.lag, m.disabled, m.gapsGivenUp, m.lateRows, m.preRun}
	for _, k := range []string{kindSubscription, kindCallback} {
		for _, r := range []string{resultOK, resultHTTPError, resultError, resultBlocked, resultUnsigned} {
			m.attempts.WithLabelValues(k, r)
		}
		for _, r := range []string{finalDelivered, finalGivenUp} {
			m.deliveries.WithLabelValues(k, r)
		}
		m.lag.WithLabelValues(k)
	}
	for _, d := range []string{wire.PreRunRun, wire.PreRunFail, wire.PreRunRetry} {
		m.preRun.WithLabelValues(d)
	}
	return m
}

// tailed counts what a pass of the tail found.
func (m *Metrics) tailed(res TailResult) {
	if m == nil {
		return
	}
	m.gapsGivenUp.Add(float64(res.GivenUp))
	m.lateRows.Add(float64(res.LateRows))
}

// attempted counts one attempt; final says how the delivery ended ("" while it goes on), lag
// is the time from its event to a success.
func (m *Metrics) attempted(kind, result, final string, lag float64) {
	if m == nil {
		return
	}
	m.attempts.WithLabelValues(kind, result).Inc()
	if final != "" {
		m.deliveries.WithLabelValues(kind, final).Inc()
	}
	if final == finalDelivered {
		m.lag.WithLabelValues(kind).Observe(lag)
	}
}

// endpointDisabled counts an endpoint disabled for its failures.
func (m *Metrics) endpointDisabled() {
	if m != nil {
		m.disabled.Inc()
	}
}

// preRunDecided counts a pre-run call.
func (m *Metrics) preRunDecided(decision string) {
	if m != nil {
		m.preRun.WithLabelValues(decision).Inc()
	}
}

// Lister reads the subscriptions and counts the pending deliveries (store.Store has it).
type Lister interface {
	WebhookList(ctx context.Context) ([]store.WebhookSubscription, error)
	WebhookDeliveryCounts(ctx context.Context) (map[string]int, error)
}

// Collector is the scrape-time collector of the webhooks, read from the database:
// gpu_orchestrator_webhook_endpoints{status} and gpu_orchestrator_webhook_pending_deliveries{kind}.
type Collector struct {
	scrape    *metrics.Scrape
	src       Lister
	endpoints *prometheus.Desc
	pending   *prometheus.Desc
}

// NewCollector returns the webhooks collector over src; failures count as collector
// "webhooks" on reg.
func NewCollector(reg *metrics.Registry, src Lister) *Collector {
	return &Collector{
		scrape: reg.Scrape("webhooks"), src: src,
		endpoints: metrics.NewDesc("webhook_endpoints", "Webhook subscriptions, by status (active, disabled), read at scrape time.",
			"status"),
		pending: metrics.NewDesc("webhook_pending_deliveries",
			"Deliveries not yet delivered nor given up, by kind (subscription, callback), read at scrape time.", "kind"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.endpoints
	ch <- c.pending
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := metrics.ScrapeContext()
	defer cancel()
	subs, err := c.src.WebhookList(ctx)
	if err != nil {
		c.scrape.Failed(ch, err, c.endpoints, c.pending)
		return
	}
	counts, err := c.src.WebhookDeliveryCounts(ctx)
	if err != nil {
		c.scrape.Failed(ch, err, c.endpoints, c.pending)
		return
	}
	byStatus := map[store.WebhookStatus]int{}
	for _, s := range subs {
		byStatus[s.Status]++
	}
	for _, s := range store.WebhookStatuses {
		metrics.Gauge(ch, c.endpoints, float64(byStatus[s]), string(s))
	}
	subscribed := 0
	for id, n := range counts {
		if id != store.DeliveryCallback {
			subscribed += n
		}
	}
	metrics.Gauge(ch, c.pending, float64(subscribed), kindSubscription)
	metrics.Gauge(ch, c.pending, float64(counts[store.DeliveryCallback]), kindCallback)
}
