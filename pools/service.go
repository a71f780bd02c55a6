package pools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// Limits of a pool's spec.
const (
	// MaxDesiredWorkers bounds desired_workers: a pool is one model's warm workers, not a fleet.
	MaxDesiredWorkers = 256
	// MaxHoldSeconds bounds hold_seconds (a week); 0 holds the pool forever.
	MaxHoldSeconds = 7 * 24 * 3600
	// poolIDMax leaves room in a worker id (128) for the suffix the local provisioner adds.
	poolIDMax = 100
)

var (
	poolIDPattern = ident.Pattern{Min: 1, Max: poolIDMax}
	// nameRE bounds the free-text names of a pool (agent, model, adapter, variant).
	nameRE = regexp.MustCompile(`^[^\x00-\x1f\x7f]{0,128}$`)
)

// Service is the pools' API: pools are created, listed, heartbeated, drained and evicted here,
// and workers register and heartbeat here. It runs in every orchestrator instance; the
// leader-only part (acting on pools) is the Reconciler. It is safe for concurrent use.
type Service struct {
	st    store.Store
	sc    *streams.Client
	cfg   *config.Config
	now   func() time.Time
	log   *slog.Logger
	waker atomic.Pointer[func()]
}

// ServiceOptions are optional dependencies of NewService.
type ServiceOptions struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// NewService returns the pools service over the store, publishing preload events with sc.
func NewService(st store.Store, sc *streams.Client, cfg *config.Config, opts ServiceOptions) *Service {
	s := &Service{st: st, sc: sc, cfg: cfg, now: opts.Now,
		log: logging.Component(opts.Logger, "pools")}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// nowUTC is the clock in UTC at the database's precision, so in-memory rows equal stored ones.
func (s *Service) nowUTC() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// HeartbeatInterval is how often workers are told to heartbeat.
func (s *Service) HeartbeatInterval() time.Duration { return s.cfg.Pools.HeartbeatInterval }

// SetWaker installs the function Reconcile calls (the running Reconciler's Wake); nil removes it.
func (s *Service) SetWaker(wake func()) {
	if wake == nil {
		s.waker.Store(nil)
		return
	}
	s.waker.Store(&wake)
}

// Reconcile asks this instance's reconciler for a pass now. It reports false when no reconciler
// runs here (this instance does not lead): the leader's next periodic pass does the work.
func (s *Service) Reconcile() bool {
	if w := s.waker.Load(); w != nil {
		(*w)()
		return true
	}
	return false
}

// CreateParams is the body of POST /workers/pool.
type CreateParams struct {
	PoolID         string
	Agent          string
	ModelID        string
	Adapter        string
	Variant        string
	Types          []string
	DesiredWorkers int
	HoldSeconds    int
	Metadata       json.RawMessage
	Actor          string
}

// CreateResult says what CreatePool did.
type CreateResult struct {
	Pool store.Pool
	// Created: the pool did not exist. Updated: its spec changed, or it restarted.
	Created, Updated bool
	// PreloadID is the preload event's entry id.
	PreloadID string
}

// CreatePool persists a pool, idempotently on its id: a new pool starts; the same spec again
// changes nothing; another spec (a new desired_workers, say) updates it; a pool that drains,
// stopped or was evicted starts again with the spec. Then it writes a preload event, every time,
// so that a call repeated after a Redis failure still announces the pool, and wakes the
// reconciler. When the preload cannot be written the pool is already saved: the error says so,
// and repeating the call is safe.
func (s *Service) CreatePool(ctx context.Context, p CreateParams) (CreateResult, error) {
	spec, err := s.validateCreate(p)
	if err != nil {
		return CreateResult{}, err
	}
	var res CreateResult
	for attempt := 0; ; attempt++ {
		res, err = s.upsertPool(ctx, p.PoolID, spec, p.Actor)
		// Two first posts of one pool race to insert it: the loser updates instead.
		if !errors.Is(err, store.ErrConflict) || attempt > 0 {
			break
		}
	}
	if err != nil {
		return CreateResult{}, fmt.Errorf("create pool %s: %w", p.PoolID, err)
	}
	if res.Created || res.Updated {
		s.log.Info("pool saved", "pool_id", p.PoolID, "status", res.Pool.Status, "created", res.Created,
			"desired_workers", spec.DesiredWorkers, "actor", p.Actor)
	}
	s.Reconcile()
	res.PreloadID, err = s.sc.PublishPreload(ctx, streams.Preload{
		PoolID: p.PoolID, Agent: spec.Agent, ModelID: spec.ModelID, Adapter: spec.Adapter,
		Variant: spec.Variant, Types: spec.Types, DesiredWorkers: spec.DesiredWorkers, At: s.nowUTC(),
	})
	if err != nil {
		return res, fmt.Errorf("create pool %s: saved, but %w", p.PoolID, err)
	}
	return res, nil
}

// upsertPool is CreatePool's transaction.
func (s *Service) upsertPool(ctx context.Context, id string, spec store.PoolSpec, actor string) (CreateResult, error) {
	var res CreateResult
	err := s.st.WithTx(ctx, func(tx store.Tx) error {
		now := s.nowUTC()
		res = CreateResult{}
		cur, err := tx.PoolGet(ctx, id, true)
		if errors.Is(err, store.ErrNotFound) {
			p := store.Pool{ID: id, Status: store.PoolStarting, StatusReason: "created by " + actor,
				StatusChangedAt: now, CreatedAt: now, UpdatedAt: now, StartedAt: now}
			applySpec(&p, spec)
			if err := tx.PoolInsert(ctx, p); err != nil {
				return err
			}
			res.Pool, res.Created = p, true
			return tx.AuditInsert(ctx, []store.AuditEvent{auditEvent(EventPoolCreated, id, now, actor, specDetails(spec))})
		}
		if err != nil {
			return err
		}
		res.Pool = cur
		if cur.Status.Live() {
			if sameSpec(specOf(cur), spec) {
				return nil
			}
			u := store.PoolUpdate{ID: id, From: cur.Status, To: cur.Status, Spec: &spec, Now: now}
			if err := tx.PoolUpdate(ctx, u); err != nil {
				return err
			}
			details := specDetails(spec)
			details["previous_desired_workers"] = cur.DesiredWorkers
			applySpec(&res.Pool, spec)
			res.Pool.UpdatedAt, res.Updated = now, true
			return tx.AuditInsert(ctx, []store.AuditEvent{auditEvent(EventPoolUpdated, id, now, actor, details)})
		}
		// Draining, stopped or evicted: posting the pool again restarts it.
		ev, err := Transition(ctx, tx, Change{Pool: &res.Pool, To: store.PoolStarting,
			Reason: "restarted by " + actor, Spec: &spec, StartedAt: &now, Now: now, Actor: actor,
			Details: specDetails(spec)})
		if err != nil {
			return err
		}
		res.Updated = true
		return tx.AuditInsert(ctx, []store.AuditEvent{ev})
	})
	return res, err
}

func specDetails(s store.PoolSpec) map[string]any {
	return map[string]any{"agent_name": s.Agent, "model_id": s.ModelID, "adapter": s.Adapter,
		"variant": s.Variant, "types": s.Types, "desired_workers": s.DesiredWorkers, "hold_seconds": s.HoldSeconds}
}

func sameSpec(a, b store.PoolSpec) bool {
	return a.Agent == b.Agent && a.ModelID == b.ModelID && a.Adapter == b.Adapter && a.Variant == b.Variant &&
		slices.Equal(a.Types, b.Types) && a.DesiredWorkers == b.DesiredWorkers && a.HoldSeconds == b.HoldSeconds &&
		sameJSON(a.Metadata, b.Metadata)
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

func invalid(field, format string, args ...any) error {
	return &engine.ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// validateCreate checks a pool's spec (400s naming the field) and returns it, types sorted.
func (s *Service) validateCreate(p CreateParams) (store.PoolSpec, error) {
	switch {
	case !poolIDPattern.MatchString(p.PoolID):
		return store.PoolSpec{}, invalid("pool_id", "must be %s", poolIDPattern.Rule())
	case p.Agent == "" || !nameRE.MatchString(p.Agent):
		return store.PoolSpec{}, invalid("agent_name", "is required: 1 to 128 printable characters")
	case p.ModelID == "" || !nameRE.MatchString(p.ModelID):
		return store.PoolSpec{}, invalid("model_id", "is required: 1 to 128 printable characters")
	case !nameRE.MatchString(p.Adapter):
		return store.PoolSpec{}, invalid("adapter", "must be at most 128 printable characters")
	case !nameRE.MatchString(p.Variant):
		return store.PoolSpec{}, invalid("variant", "must be at most 128 printable characters")
	case len(p.Types) == 0:
		return store.PoolSpec{}, invalid("types", "name at least one job type")
	case p.DesiredWorkers < 0 || p.DesiredWorkers > MaxDesiredWorkers:
		return store.PoolSpec{}, invalid("desired_workers", "must be in 0..%d", MaxDesiredWorkers)
	case p.HoldSeconds < 0 || p.HoldSeconds > MaxHoldSeconds:
		return store.PoolSpec{}, invalid("hold_seconds", "must be in 0..%d (0: hold forever)", MaxHoldSeconds)
	}
	types := slices.Clone(p.Types)
	slices.Sort(types)
	for i, t := range types {
		if s.cfg.JobType(t) == nil {
			return store.PoolSpec{}, invalid("types", "job type %q is not configured", t)
		}
		if i > 0 && types[i-1] == t {
			return store.PoolSpec{}, invalid("types", "job type %q is listed twice", t)
		}
	}
	if len(p.Metadata) > 0 {
		var obj map[string]any
		if err := json.Unmarshal(p.Metadata, &obj); err != nil || obj == nil {
			return store.PoolSpec{}, invalid("metadata", "must be a JSON object")
		}
	}
	return store.PoolSpec{Agent: p.Agent, ModelID: p.ModelID, Adapter: p.Adapter, Variant: p.Variant,
		Types: types, DesiredWorkers: p.DesiredWorkers, HoldSeconds: p.HoldSeconds, Metadata: p.Metadata}, nil
}

// ListPools returns every pool, by id.
func (s *Service) ListPools(ctx context.Context) ([]store.Pool, error) {
	pools, err := s.st.PoolList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return pools, nil
}

// GetPool returns one pool and its registered workers (offline ones included).
func (s *Service) GetPool(ctx context.Context, id string) (store.Pool, []store.Worker, error) {
	p, err := s.st.PoolGet(ctx, id, false)
	if err != nil {
		return store.Pool{}, nil, fmt.Errorf("get pool: %w", err)
	}
	ws, err := s.st.WorkerList(ctx, id, false)
	if err != nil {
		return store.Pool{}, nil, fmt.Errorf("get pool %s: %w", id, err)
	}
	return p, ws, nil
}

// HeartbeatPool records that the pool's agent still wants it: an idle pool's hold counts from
// its last heartbeat. It returns the pool.
func (s *Service) HeartbeatPool(ctx context.Context, id string) (store.Pool, error) {
	if err := s.st.PoolTouch(ctx, id, true, s.nowUTC()); err != nil {
		return store.Pool{}, fmt.Errorf("heartbeat pool: %w", err)
	}
	p, err := s.st.PoolGet(ctx, id, false)
	if err != nil {
		return store.Pool{}, fmt.Errorf("heartbeat pool: %w", err)
	}
	return p, nil
}
