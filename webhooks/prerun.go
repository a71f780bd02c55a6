package webhooks

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// PreRun calls the pre-run hooks of job types (webhooks.pre_run): before an attempt of a job
// of such a type starts, its worker asks the orchestrator (POST /internal/jobs/pre_run), which
// calls the hook, signed with webhooks.pre_run_secret, and answers what the worker does:
// run the handler (2xx), fail the attempt for good with the hook's message (4xx), or fail it
// so that it is retried with the type's backoff (anything else: 5xx, 3xx, a timeout, no
// answer). The orchestrator makes the call, not the worker: workers may not reach the hook,
// and must not hold its secret.
type PreRun struct {
	hooks      map[string]string
	secret     string
	client     *http.Client
	maxPayload int
	now        func() time.Time
	metrics    *Metrics
	log        *slog.Logger
}

// PreRunOptions are PreRun's optional collaborators.
type PreRunOptions struct {
	// Client calls the hooks (default NewClient with webhooks.connect_timeout and
	// webhooks.pre_run_timeout).
	Client  *http.Client
	Metrics *Metrics
	Logger  *slog.Logger
	Now     func() time.Time
}

// NewPreRun returns the pre-run hooks of cfg.
func NewPreRun(cfg *config.Config, opts PreRunOptions) *PreRun {
	w := cfg.Webhooks
	p := &PreRun{hooks: w.PreRun, secret: w.PreRunSecret, client: opts.Client, maxPayload: w.MaxBodyBytes / 2,
		now: opts.Now, metrics: opts.Metrics, log: logging.Component(opts.Logger, "pre-run")}
	if p.client == nil {
		p.client = NewClient(ClientConfig{ConnectTimeout: min(w.ConnectTimeout, w.PreRunTimeout), Timeout: w.PreRunTimeout,
			AllowPrivate: w.AllowPrivate})
	}
	if p.now == nil {
		p.now = time.Now
	}
	p.maxPayload = cmp.Or(p.maxPayload, config.WebhooksMaxBodyBytesDefault/2)
	return p
}

// Types are the job types that have a pre-run hook, sorted.
func (p *PreRun) Types() []string {
	types := make([]string, 0, len(p.hooks))
	for t := range p.hooks {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// Check calls job's type's pre-run hook about its current attempt and says what the worker
// does; a type without a hook runs.
func (p *PreRun) Check(ctx context.Context, job store.Job) wire.PreRunResponse {
	url, ok := p.hooks[job.Type]
	if !ok {
		return wire.PreRunResponse{Decision: wire.PreRunRun}
	}
	data := wire.WebhookJobData{JobID: job.ID, Type: job.Type, Agent: job.Agent, Status: string(job.Status),
		Attempt: job.Attempts, MaxAttempts: job.MaxAttempts, Payload: job.Payload}
	if len(job.Payload) > p.maxPayload {
		data.Payload, data.PayloadOmitted = nil, true
	}
	now := p.now().UTC()
	raw, _ := json.Marshal(data) // only JSON the store holds
	body, _ := json.Marshal(wire.WebhookEvent{ID: fmt.Sprintf("pre_%s_%d", job.ID, job.Attempts), Type: EventPreRun,
		CreatedAt: now, Data: raw})
	a := post(ctx, p.client, call{url: url, secret: p.secret, key: fmt.Sprintf("pre_run-%s-%d", job.ID, job.Attempts),
		event: EventPreRun, body: body, now: now})
	out := decide(a)
	p.metrics.preRunDecided(out.Decision)
	if out.Decision != wire.PreRunRun {
		p.log.Info("pre-run hook held a job back", "job_id", job.ID, "attempt", job.Attempts, "job_type", job.Type,
			"decision", out.Decision, "status_code", a.status, "message", out.Message)
	}
	return out
}

// decide turns a hook's answer into the worker's decision.
func decide(a answer) wire.PreRunResponse {
	switch {
	case a.ok():
		return wire.PreRunResponse{Decision: wire.PreRunRun, StatusCode: a.status}
	case a.err == nil && a.status >= 400 && a.status < 500 && a.status != http.StatusRequestTimeout &&
		a.status != http.StatusTooManyRequests:
		// A refusal. 408 and 429 are the hook's own load (it timed out, it is rate
		// limiting): those retry, as a 5xx does.
		msg := hookMessage(a.text)
		if msg == "" {
			msg = fmt.Sprintf("the pre-run hook refused the job (HTTP %d)", a.status)
		}
		return wire.PreRunResponse{Decision: wire.PreRunFail, Message: msg, StatusCode: a.status}
	}
	return wire.PreRunResponse{Decision: wire.PreRunRetry, Message: "pre-run hook: " + a.problem(), StatusCode: a.status}
}

// hookMessage is the message of a hook's refusal: its JSON "message" or "error" (a string, or
// an object with a "message"), else its text.
func hookMessage(text string) string {
	var v struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal([]byte(text), &v) == nil {
		if v.Message != "" {
			return clip(v.Message)
		}
		var s string
		if json.Unmarshal(v.Error, &s) == nil && s != "" {
			return clip(s)
		}
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(v.Error, &inner) == nil && inner.Message != "" {
			return clip(inner.Message)
		}
	}
	return clip(strings.TrimSpace(text))
}
