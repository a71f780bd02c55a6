package engine

import (
	"github.com/gpuorch/orchestrator/internal/hookurl"
)

// checkCallback checks a submit's callback_url: the URL rules of hooks (internal/hookurl,
// without a DNS lookup: a submit does not wait on DNS, and every dial is checked anyway), and
// a cluster that can sign its callbacks (webhooks.callback_secret).
func (e *Engine) checkCallback(p *SubmitParams) error {
	if p.CallbackURL == "" {
		return nil
	}
	w := e.cfg.Webhooks
	if w.CallbackSecret == "" {
		return invalid("callback_url", "this cluster has no webhooks.callback_secret, so a callback could not be signed; "+
			"an operator sets one (docs/configuration.md, Webhooks)")
	}
	if _, err := hookurl.Check(p.CallbackURL, w.AllowPrivate); err != nil {
		return invalid("callback_url", "%s", err)
	}
	return nil
}
