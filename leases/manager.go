package leases

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/store"
)

// MaxTTL bounds the time to live of a lease.
const MaxTTL = 24 * time.Hour

// TokenPrefix starts every lease token, so that one is easy to recognise in logs and by secret
// scanners.
const TokenPrefix = "lt_"

// Config configures a Manager. Zero fields take the defaults of package config.
type Config struct {
	// TTL is the time to live of a lease that asks for none (config.LeaseTTLDefault).
	TTL time.Duration
	// SafetyMarginMB is the memory of every GPU never handed out (config.LeaseSafetyMarginMBDefault).
	SafetyMarginMB int64
	// TelemetryFreshness is how old a GPU's telemetry may be for placement to use it
	// (config.LeaseTelemetryFreshnessDefault).
	TelemetryFreshness time.Duration
}

// ConfigFrom takes the lease settings of the process configuration.
func ConfigFrom(c *config.Config) Config {
	return Config{TTL: c.Leases.TTL, SafetyMarginMB: c.Leases.SafetyMarginMB, TelemetryFreshness: c.Leases.TelemetryFreshness}
}

func (c Config) withDefaults() Config {
	c.TTL = cmp.Or(c.TTL, config.LeaseTTLDefault)
	c.SafetyMarginMB = cmp.Or(c.SafetyMarginMB, config.LeaseSafetyMarginMBDefault)
	c.TelemetryFreshness = cmp.Or(c.TelemetryFreshness, config.LeaseTelemetryFreshnessDefault)
	return c
}

func (c Config) validate() error {
	switch {
	case c.TTL <= 0 || c.TTL > MaxTTL:
		return fmt.Errorf("configure leases: ttl %s: want (0, %s]", c.TTL, MaxTTL)
	case c.SafetyMarginMB < 0:
		return fmt.Errorf("configure leases: safety margin %d MB must not be negative", c.SafetyMarginMB)
	case c.TelemetryFreshness <= 0:
		return fmt.Errorf("configure leases: telemetry freshness %s must be positive", c.TelemetryFreshness)
	}
	return nil
}

// Options are optional dependencies of New.
type Options struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// NodeID is the node of this orchestrator: the node of a lease that names none.
	NodeID string
	// Recorded, when set, is called after a node's GPU telemetry was recorded: the wiring
	// wakes the scheduler, as the memory free there may have changed.
	Recorded func(nodeID string)
	// Quotas, when set, returns an agent's GPU quota: the most GPU memory (MB) and GPUs it may
	// hold at once in active gpu leases, 0 for no cap. The wiring reads the admission
	// policies' cache (admission.Controller.Quota); grants and the scheduler enforce it.
	Quotas func(agent string) (maxGPUMemoryMB int64, maxGPUs int)
}

// Manager grants, renews, releases and lists leases, and records GPU telemetry. It is safe for
// concurrent use; every decision is made in the database, so any number of orchestrator
// instances may run one.
type Manager struct {
	store  store.Store
	cfg    Config
	now    func() time.Time
	log    *slog.Logger
	nodeID string
	shape  shape // the cluster's GPUs, for Unsatisfiable
	// recorded: see Options.Recorded.
	recorded func(nodeID string)
	seen     nodeSeen // the node registry rows this instance wrote (node_labels.go)
	// quotas: see Options.Quotas.
	quotas func(agent string) (int64, int)
}

// New returns a Manager over st. It fails on an invalid configuration.
func New(st store.Store, cfg Config, opts Options) (*Manager, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Manager{store: st, cfg: cfg, now: opts.Now, nodeID: opts.NodeID, recorded: opts.Recorded,
		quotas: opts.Quotas, log: logging.Component(opts.Logger, "leases")}
	if m.now == nil {
		m.now = time.Now
	}
	return m, nil
}

// Config returns the configuration the manager runs with (defaults filled in).
func (m *Manager) Config() Config { return m.cfg }

// NodeID returns this orchestrator's node.
func (m *Manager) NodeID() string { return m.nodeID }

// nowUTC is the clock in UTC at the database's precision, so in-memory rows equal stored ones.
func (m *Manager) nowUTC() time.Time { return m.now().UTC().Truncate(time.Microsecond) }

// NewToken returns a fresh lease token: TokenPrefix and 128 random bits in hex. Tokens are
// capabilities (they renew and release a lease), so they come from crypto/rand.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand aborts the process rather)
	return TokenPrefix + hex.EncodeToString(b[:])
}

// GrantParams describe a lease to grant.
type GrantParams struct {
	Agent  string
	JobID  string // a worker's lease of a claimed job; empty for an agent's own lease
	NodeID string // empty: this orchestrator's node
	Mode   store.LeaseMode
	// MemoryMB is the GPU memory needed on each GPU (gpu), or informational (cpu).
	MemoryMB int64
	// GPUs is how many distinct GPUs of the node a gpu lease holds (0 counts as 1).
	GPUs      int
	Exclusive bool
	TTL       time.Duration // 0: the configured default
	Metadata  json.RawMessage
	// Actor is the audit actor.
	Actor string
}

// Prepare builds the lease of p at now, on p.NodeID as given (Grant fills in the default),
// placing a gpu lease on node: a lock of that node taken with LockNode in the caller's
// transaction. It writes nothing: the caller inserts the lease and GrantedEvent's audit row
// in that transaction. A gpu lease that does not fit returns a *DenialError.
func (m *Manager) Prepare(node *NodeLock, p GrantParams, now time.Time) (store.Lease, error) {
	ttl := cmp.Or(p.TTL, m.cfg.TTL)
	l := store.Lease{
		Token: NewToken(), Agent: p.Agent, JobID: p.JobID, NodeID: p.NodeID,
		Mode: p.Mode, MemoryMB: p.MemoryMB, TTL: ttl, Status: store.LeaseActive,
		CreatedAt: now, ExpiresAt: now.Add(ttl), LastHeartbeat: now, Metadata: p.Metadata,
	}
	if p.Mode != store.LeaseGPU {
		return l, nil
	}
	if node == nil || node.nodeID != l.NodeID {
		return store.Lease{}, fmt.Errorf("prepare gpu lease on node %s: the node is not locked", l.NodeID)
	}
	gpus, reserve, err := node.Place(Request{MemoryMB: p.MemoryMB, GPUs: p.GPUs, Exclusive: p.Exclusive})
	if err != nil {
		return store.Lease{}, err
	}
	l.GPUIndex, l.GPUIndexes, l.MemoryMB, l.Exclusive = &gpus[0], gpus, reserve, p.Exclusive
	return l, nil
}

// Grant grants one lease in its own transaction: for a gpu lease it locks the node's GPU rows,
// places the lease, inserts it and its audit row. A denial is a *DenialError; a gpu lease that
// would take its agent past its GPU quota is a *QuotaError (checked under the lock of every
// node's GPU rows, so that concurrent grants of the agent see each other).
func (m *Manager) Grant(ctx context.Context, p GrantParams) (store.Lease, error) {
	now := m.nowUTC()
	p.NodeID = cmp.Or(p.NodeID, m.nodeID)
	var quota Quota
	if p.Mode == store.LeaseGPU {
		quota = m.Quota(p.Agent)
	}
	var lease store.Lease
	err := m.store.WithTx(ctx, func(tx store.Tx) error {
		var (
			node *NodeLock
			err  error
		)
		switch {
		case quota.Limited():
			node, err = m.LockNodeForQuota(ctx, tx, p.NodeID, now)
		case p.Mode == store.LeaseGPU:
			node, err = m.LockNode(ctx, tx, p.NodeID, now)
		}
		if err != nil {
			return err
		}
		if lease, err = m.Prepare(node, p, now); err != nil {
			return err
		}
		if quota.Limited() {
			// After the placement: an exclusive lease counts the whole GPU it reserves.
			if err := checkQuota(ctx, tx, quota, lease); err != nil {
				return err
			}
		}
		if err := tx.LeaseInsert(ctx, []store.Lease{lease}); err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{GrantedEvent(lease, p.Actor)})
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("grant lease: %w", err)
	}
	return lease, nil
}

// Heartbeat extends an active lease by its TTL. agent limits the caller to its own agent's
// leases ("" for any). An unknown token is ErrNotFound; a lease that ended, or whose expiry
// has passed (it is expired, only not yet purged), is a *GoneError and stays as it is.
func (m *Manager) Heartbeat(ctx context.Context, token, agent string) (store.Lease, error) {
	now := m.nowUTC()
	l, err := m.visible(ctx, m.store, token, agent, false)
	if err != nil {
		return store.Lease{}, err
	}
	if l.Status != store.LeaseActive || !l.ExpiresAt.After(now) {
		return l, &GoneError{Token: token, Status: l.Status}
	}
	got, err := m.heartbeat(ctx, []string{token}, now)
	if err != nil {
		return store.Lease{}, fmt.Errorf("heartbeat lease: %w", err)
	}
	if len(got) != 1 {
		return store.Lease{}, ErrNotFound
	}
	l = got[0]
	if l.Status != store.LeaseActive || !l.ExpiresAt.After(now) {
		// It ended or expired between the read and the update.
		return l, &GoneError{Token: token, Status: l.Status}
	}
	return l, nil
}

// Release ends an agent's lease (active → released) with its audit row. Releasing a released
// lease again returns it unchanged; an expired one is a *GoneError; a job's lease is
// ErrBoundToJob (cancel the job instead).
func (m *Manager) Release(ctx context.Context, token, agent, actor string) (store.Lease, error) {
	now := m.nowUTC()
	var l store.Lease
	err := m.store.WithTx(ctx, func(tx store.Tx) error {
		var err error
		if l, err = m.visible(ctx, tx, token, agent, true); err != nil {
			return err
		}
		switch {
		case l.JobID != "":
			return fmt.Errorf("release lease of job %s: %w", l.JobID, ErrBoundToJob)
		case l.Status == store.LeaseReleased:
			return nil
		case l.Status == store.LeaseExpired:
			return &GoneError{Token: token, Status: l.Status}
		}
		ev, err := Transition(ctx, tx, &l, store.LeaseReleased, now, actor, nil)
		if err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{ev})
	})
	if err != nil {
		return l, fmt.Errorf("release lease: %w", err)
	}
	return l, nil
}

// List returns leases newest first.
func (m *Manager) List(ctx context.Context, p store.LeaseListParams) ([]store.Lease, error) {
	leases, err := m.store.LeaseList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return leases, nil
}

// Get returns one lease visible to agent ("" for any).
func (m *Manager) Get(ctx context.Context, token, agent string) (store.Lease, error) {
	return m.visible(ctx, m.store, token, agent, false)
}

// lookup reads the lease of token: a row of orchestrator_leases, or the lease held in a job's
// row (InJobRow), read from the job.
func (m *Manager) lookup(ctx context.Context, ex store.Executor, token string, forUpdate bool) (store.Lease, error) {
	jobID, inRow := JobOfToken(token)
	if !inRow {
		return ex.LeaseGet(ctx, token, forUpdate)
	}
	jobs, err := ex.JobGetMany(ctx, []string{jobID}, forUpdate)
	if err != nil || len(jobs) == 0 {
		return store.Lease{}, cmp.Or(err, store.ErrNotFound)
	}
	if l, ok := JobLease(&jobs[0], "", m.cfg.TTL); ok && l.Token == token {
		return l, nil
	}
	status, err := EndedJobLease(ctx, ex, jobID, token)
	if err != nil {
		return store.Lease{}, err
	}
	return store.Lease{Token: token, Agent: jobs[0].Agent, JobID: jobID, Mode: store.LeaseCPU, Status: status}, nil
}

// visible reads a lease, hiding another agent's as not found (so tokens cannot be probed).
func (m *Manager) visible(ctx context.Context, ex store.Executor, token, agent string, forUpdate bool) (store.Lease, error) {
	l, err := m.lookup(ctx, ex, token, forUpdate)
	if errors.Is(err, store.ErrNotFound) || (err == nil && agent != "" && l.Agent != agent) {
		return store.Lease{}, ErrNotFound
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("read lease: %w", err)
	}
	return l, nil
}
