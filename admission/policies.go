package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/store"
)

// Audit event types of policy changes.
const (
	EventPolicySet     = "admission.policy_set"
	EventPolicyDeleted = "admission.policy_deleted"
)

// maxAgentLen is the longest agent name a policy can have (the column's width).
const maxAgentLen = 128

// policyCache is this instance's copy of admission_policies. Every decision reads it (no
// query on the hot path); the refresher replaces it whole every refresh interval, and a change
// made through this instance is put in at once. Safe for concurrent use.
type policyCache struct {
	cfgDefault store.AdmissionPolicy

	mu       sync.RWMutex
	rows     map[string]store.AdmissionPolicy
	writes   uint64 // local changes so far: a refresh that read before one must not undo it
	loadedAt time.Time
}

func newPolicyCache(def config.AdmissionPolicy) *policyCache {
	return &policyCache{
		cfgDefault: store.AdmissionPolicy{Agent: store.AdmissionDefaultAgent, RatePerSec: def.RatePerSec,
			Burst: def.Burst, MaxPending: def.MaxPending, MaxGPUMemoryMB: def.MaxGPUMemoryMB, MaxGPUs: def.MaxGPUs,
			Enabled: true},
		rows: map[string]store.AdmissionPolicy{},
	}
}

// lookup returns the policy that applies to agent and whether it is the agent's own (else the
// default: the "*" row when there is one, the configured default otherwise).
func (p *policyCache) lookup(agent string) (store.AdmissionPolicy, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if r, ok := p.rows[agent]; ok {
		return r, agent != store.AdmissionDefaultAgent
	}
	if r, ok := p.rows[store.AdmissionDefaultAgent]; ok {
		return r, false
	}
	return p.cfgDefault, false
}

// defaultPolicy returns the effective default policy and whether it comes from the table.
func (p *policyCache) defaultPolicy() (store.AdmissionPolicy, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if r, ok := p.rows[store.AdmissionDefaultAgent]; ok {
		return r, true
	}
	return p.cfgDefault, false
}

// generation is read before the refresh's query; replace refuses a read older than a local
// change.
func (p *policyCache) generation() uint64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.writes
}

// replace installs the rows read by a refresh that started at generation gen. It returns the
// agents that were not in the cache before (their metric labels are pre-created), and false
// when a local change happened since gen: the next refresh will see it.
func (p *policyCache) replace(rows []store.AdmissionPolicy, gen uint64, at time.Time) (added []string, applied bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.writes != gen {
		return nil, false
	}
	next := make(map[string]store.AdmissionPolicy, len(rows))
	for _, r := range rows {
		next[r.Agent] = r
		if _, ok := p.rows[r.Agent]; !ok {
			added = append(added, r.Agent)
		}
	}
	p.rows, p.loadedAt = next, at
	return added, true
}

func (p *policyCache) put(r store.AdmissionPolicy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows[r.Agent] = r
	p.writes++
}

func (p *policyCache) remove(agent string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.rows, agent)
	p.writes++
}

// list returns the cached rows by agent and when they were last loaded from the table.
func (p *policyCache) list() ([]store.AdmissionPolicy, time.Time) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]store.AdmissionPolicy, 0, len(p.rows))
	for _, agent := range slices.Sorted(maps.Keys(p.rows)) {
		out = append(out, p.rows[agent])
	}
	return out, p.loadedAt
}

// Quota returns the GPU quota of agent: the most GPU memory (MB) and the most GPUs it may hold
// at once in active gpu leases, 0 for no cap. It is its own policy's, else the default
// policy's, which caps each agent without a row on its own (not all of them together). An
// agent whose policy is disabled, and every agent while admission control is disabled, has
// none. The scheduler and the lease grants read it (leases.Options.Quotas) from this cache,
// so a change applies within one refresh interval everywhere.
func (c *Controller) Quota(agent string) (maxGPUMemoryMB int64, maxGPUs int) {
	if c.cfg.Disabled {
		return 0, 0
	}
	p, _ := c.policies.lookup(agent)
	if !p.Enabled {
		return 0, 0
	}
	return p.MaxGPUMemoryMB, p.MaxGPUs
}

// PolicyUpdate changes the policy of one agent (store.AdmissionDefaultAgent: the default
// policy). Nil fields keep their current value: the agent's row, or for an agent without one
// the default policy's (a new row is enabled unless Enabled says otherwise). Burst is the
// exception: when RatePerSec changes and Burst is nil, the burst becomes two seconds' worth
// of the new rate (config.AdmissionBurstFor), since a burst sized for another rate is wrong.
type PolicyUpdate struct {
	Agent      string
	RatePerSec *float64
	Burst      *int
	MaxPending *int
	// MaxGPUMemoryMB and MaxGPUs are the agent's GPU quota (0: no cap).
	MaxGPUMemoryMB *int64
	MaxGPUs        *int
	Enabled        *bool
	// Actor is who made the change, for the audit row.
	Actor string
}

// PolicyError is an invalid PolicyUpdate; Field names the offending field.
type PolicyError struct {
	Field   string
	Message string
}

// Error implements error.
func (e *PolicyError) Error() string { return "admission policy: " + e.Field + " " + e.Message }

// SetPolicy writes the policy of u.Agent with its audit row in one transaction and puts it in
// this instance's cache at once; the other instances see it at their next refresh.
func (c *Controller) SetPolicy(ctx context.Context, u PolicyUpdate) (store.AdmissionPolicy, error) {
	if u.Agent == "" || len(u.Agent) > maxAgentLen {
		return store.AdmissionPolicy{}, &PolicyError{Field: "agent", Message: fmt.Sprintf("must be 1 to %d bytes", maxAgentLen)}
	}
	var stored store.AdmissionPolicy
	err := c.store.WithTx(ctx, func(tx store.Tx) error {
		cur, err := tx.AdmissionPolicyGet(ctx, u.Agent)
		existed := err == nil
		switch {
		case errors.Is(err, store.ErrNotFound):
			cur, _ = c.policies.defaultPolicy()
			cur.Agent, cur.Enabled = u.Agent, true
		case err != nil:
			return err
		}
		next, perr := applyUpdate(cur, u)
		if perr != nil {
			return perr
		}
		next.UpdatedAt = c.now().UTC()
		if stored, err = tx.AdmissionPolicyUpsert(ctx, next); err != nil {
			return err
		}
		details := map[string]any{"policy": policyDetails(stored)}
		if existed {
			details["previous"] = policyDetails(cur)
		}
		raw, _ := json.Marshal(details)
		return tx.AuditInsert(ctx, []store.AuditEvent{{TS: next.UpdatedAt, EventType: EventPolicySet, Actor: u.Actor, Details: raw}})
	})
	if err != nil {
		return store.AdmissionPolicy{}, fmt.Errorf("set admission policy of %s: %w", u.Agent, err)
	}
	c.policies.put(stored)
	c.metrics.precreate(stored.Agent)
	c.log.Info("admission policy set", "agent", stored.Agent, "rate_per_sec", stored.RatePerSec,
		"burst", stored.Burst, "max_pending", stored.MaxPending, "max_gpu_memory_mb", stored.MaxGPUMemoryMB,
		"max_gpus", stored.MaxGPUs, "enabled", stored.Enabled, "actor", u.Actor)
	return stored, nil
}

// DeletePolicy deletes the policy of agent with an audit row: the agent falls back to the
// default policy (deleting the "*" row brings back the configured default). ErrNotFound when
// the agent has no policy.
func (c *Controller) DeletePolicy(ctx context.Context, agent, actor string) error {
	err := c.store.WithTx(ctx, func(tx store.Tx) error {
		cur, err := tx.AdmissionPolicyGet(ctx, agent)
		if err != nil {
			return err
		}
		if err := tx.AdmissionPolicyDelete(ctx, agent); err != nil {
			return err
		}
		raw, _ := json.Marshal(map[string]any{"previous": policyDetails(cur)})
		return tx.AuditInsert(ctx, []store.AuditEvent{{TS: c.now().UTC(), EventType: EventPolicyDeleted, Actor: actor, Details: raw}})
	})
	if err != nil {
		return fmt.Errorf("delete admission policy of %s: %w", agent, err)
	}
	c.policies.remove(agent)
	c.log.Info("admission policy deleted", "agent", agent, "actor", actor)
	return nil
}

// applyUpdate returns cur changed by u, validated.
func applyUpdate(cur store.AdmissionPolicy, u PolicyUpdate) (store.AdmissionPolicy, error) {
	next := cur
	if u.RatePerSec != nil {
		next.RatePerSec = *u.RatePerSec
		if u.Burst == nil && next.RatePerSec != cur.RatePerSec {
			next.Burst = config.AdmissionBurstFor(next.RatePerSec)
		}
	}
	if u.Burst != nil {
		next.Burst = *u.Burst
	}
	if u.MaxPending != nil {
		next.MaxPending = *u.MaxPending
	}
	if u.MaxGPUMemoryMB != nil {
		next.MaxGPUMemoryMB = *u.MaxGPUMemoryMB
	}
	if u.MaxGPUs != nil {
		next.MaxGPUs = *u.MaxGPUs
	}
	if u.Enabled != nil {
		next.Enabled = *u.Enabled
	}
	err := config.ValidateAdmissionPolicy(config.AdmissionPolicy{RatePerSec: next.RatePerSec, Burst: next.Burst,
		MaxPending: next.MaxPending, MaxGPUMemoryMB: next.MaxGPUMemoryMB, MaxGPUs: next.MaxGPUs})
	var fe *config.AdmissionPolicyError
	if errors.As(err, &fe) {
		return next, &PolicyError{Field: fe.Field, Message: fe.Message}
	}
	return next, err
}

func policyDetails(p store.AdmissionPolicy) map[string]any {
	return map[string]any{"agent": p.Agent, "rate_per_sec": p.RatePerSec, "burst": p.Burst,
		"max_pending": p.MaxPending, "max_gpu_memory_mb": p.MaxGPUMemoryMB, "max_gpus": p.MaxGPUs, "enabled": p.Enabled}
}
