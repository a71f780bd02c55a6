package admission

import (
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// Status is the admission state of this instance, for GET /control/admission: what its
// decisions are made from right now.
type Status struct {
	Enabled bool
	// DefaultPolicy applies to agents without a policy of their own; DefaultFromTable says
	// whether it is the "*" row (else the configuration's default_policy).
	DefaultPolicy    store.AdmissionPolicy
	DefaultFromTable bool
	// Policies are the rows of admission_policies as this instance last read them.
	Policies         []store.AdmissionPolicy
	PoliciesLoadedAt time.Time
	GPU              GPUGateState
	Queues           []QueueState
	QueuesCountedAt  time.Time
	Limiter          LimiterState
	// LimiterDownGPU and LimiterDownCPU are what happens while the limiter is down.
	LimiterDownGPU  string
	LimiterDownCPU  string
	RefreshInterval time.Duration
}

// Status returns the state of the controller's caches.
func (c *Controller) Status() Status {
	def, fromTable := c.policies.defaultPolicy()
	policies, loadedAt := c.policies.list()
	queues, countedAt := c.queues.state()
	for i, q := range queues {
		if jt := c.types[q.Type]; jt != nil {
			queues[i].CPUFallback = jt.CPUFallback
		}
	}
	return Status{
		Enabled:          !c.cfg.Disabled,
		DefaultPolicy:    def,
		DefaultFromTable: fromTable,
		Policies:         policies,
		PoliciesLoadedAt: loadedAt,
		GPU:              c.gpu.State(),
		Queues:           queues,
		QueuesCountedAt:  countedAt,
		Limiter:          c.limiter.State(),
		LimiterDownGPU:   c.cfg.LimiterDownGPU,
		LimiterDownCPU:   c.cfg.LimiterDownCPU,
		RefreshInterval:  c.cfg.RefreshInterval,
	}
}

// NotReadyError says why admission is degraded; its message is safe to show on /readyz.
type NotReadyError struct{ Reason string }

// Error implements error.
func (e *NotReadyError) Error() string { return e.Reason }

// Ready returns nil while admission decides normally, and a *NotReadyError saying what it does
// instead while the limiter (Redis) is unreachable.
func (c *Controller) Ready() error {
	if c.cfg.Disabled {
		return nil
	}
	st := c.limiter.State()
	if st.Up {
		return nil
	}
	return &NotReadyError{Reason: fmt.Sprintf(
		"limiter unreachable since %s: token buckets unchecked; GPU work fails %s, CPU work fails %s",
		st.DownSince.UTC().Format(time.RFC3339), c.cfg.LimiterDownGPU, c.cfg.LimiterDownCPU)}
}
