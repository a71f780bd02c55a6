package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// Routing a job to a pool or a model (submit's pool_id and model_id). Such a job is the
// scheduler's: it is placed on a node where a live worker of the pool (of a pool serving the
// model) runs its type, and published to that pool's stream of the node (store.Target), which
// only those workers read. Only the job's own agent's pools take it: a pool's workers, model
// and slots are its agent's. docs/architecture.md, "GPU scheduling".

// ReasonNoPoolForModel starts the waiting reason of a job whose model no pool with a live
// worker of its type serves.
const ReasonNoPoolForModel = "no_pool_for_model"

// EventModelUnserved is the audit event of a job that starts to wait for a pool of its model:
// an operator, or an autoscaler reading the event feed, may start one.
const EventModelUnserved = "job.model_unserved"

// PoolIDPattern is the pool ids a submit may route to (the pools' own rule).
var PoolIDPattern = ident.Pattern{Min: 1, Max: 100}

// poolsTTL is how long submit reuses the pools it read: a pool found is used from it, a pool
// not found is read again (a pool just created routes at once).
const poolsTTL = 5 * time.Second

// checkRoute checks the form of p's pool_id and model_id.
func checkRoute(p *SubmitParams) error {
	if p.PoolID != "" && !PoolIDPattern.MatchString(p.PoolID) {
		return invalid("pool_id", "must be %s", PoolIDPattern.Rule())
	}
	if p.ModelID != "" && (len(p.ModelID) > 128 || slices.ContainsFunc([]rune(p.ModelID), unicode.IsControl)) {
		return invalid("model_id", "must be 1 to 128 printable characters (the pools' model_id)")
	}
	return nil
}

// checkRouted refuses a job routed where nothing could ever run it: a pool that does not exist
// or does not run the job's type, a pool that does not serve the job's model, or a model that
// no pool of the type serves (unless the type lets such jobs wait, wait_for_model).
func (e *Engine) checkRouted(ctx context.Context, p SubmitParams, jt *config.JobType) error {
	if p.PoolID == "" && p.ModelID == "" {
		return nil
	}
	if p.PoolID != "" {
		pool, ok, err := e.pools.get(ctx, e.store, p.PoolID, e.nowUTC())
		switch {
		case err != nil:
			return fmt.Errorf("check pool_id: %w", err)
		case !ok || pool.Agent != p.Agent:
			// Another agent's pool is as good as none: its workers, its model and its slots
			// are that agent's.
			return &UnsatisfiableError{Field: "pool_id", Message: fmt.Sprintf("agent %q has no pool %q (GET /workers/pools lists them)",
				p.Agent, p.PoolID)}
		case !slices.Contains(pool.Types, jt.Name):
			return &UnsatisfiableError{Field: "pool_id", Message: fmt.Sprintf("pool %q runs types %v, not %q", p.PoolID, pool.Types, jt.Name)}
		case p.ModelID != "" && pool.ModelID != p.ModelID:
			return &UnsatisfiableError{Field: "model_id", Message: fmt.Sprintf("pool %q serves model %q, not %q", p.PoolID,
				pool.ModelID, p.ModelID)}
		}
		return nil
	}
	served, err := e.pools.serves(ctx, e.store, p.ModelID, jt.Name, p.Agent, e.nowUTC())
	if err != nil {
		return fmt.Errorf("check model_id: %w", err)
	}
	if !served && !jt.WaitForModel {
		return &UnsatisfiableError{Field: "model_id", Message: fmt.Sprintf("no pool of agent %q serves model %q for type %q; "+
			"create one (POST /workers/pool), or let the type's jobs wait for one (job_types.%s.wait_for_model)", p.Agent,
			p.ModelID, jt.Name, jt.Name)}
	}
	return nil
}

// poolCache is the pools submit routes against, read again once poolsTTL has passed or when a
// pool asked for is missing.
type poolCache struct{ pools cached[map[string]store.Pool] }

func (c *poolCache) load(ctx context.Context, st store.Store, now time.Time, force bool) (map[string]store.Pool, error) {
	return c.pools.get(now, poolsTTL, force, func() (map[string]store.Pool, error) {
		list, err := st.PoolList(ctx)
		return poolsByID(list), err
	})
}

// get returns pool id, reading the pools again when it is not among those read.
func (c *poolCache) get(ctx context.Context, st store.Store, id string, now time.Time) (store.Pool, bool, error) {
	for _, force := range []bool{false, true} {
		pools, err := c.load(ctx, st, now, force)
		if err != nil {
			return store.Pool{}, false, err
		}
		if p, ok := pools[id]; ok {
			return p, true, nil
		}
	}
	return store.Pool{}, false, nil
}

// serves reports whether a pool of agent serves model for typ, reading the pools again before
// it says no.
func (c *poolCache) serves(ctx context.Context, st store.Store, model, typ, agent string, now time.Time) (bool, error) {
	for _, force := range []bool{false, true} {
		pools, err := c.load(ctx, st, now, force)
		if err != nil {
			return false, err
		}
		for _, p := range pools {
			if p.ModelID == model && p.Agent == agent && slices.Contains(p.Types, typ) {
				return true, nil
			}
		}
	}
	return false, nil
}

// passPools reads the pools when a waiting job is routed to a pool or a model (nil otherwise).
func (e *Engine) passPools(ctx context.Context, waiting []store.Job) (map[string]store.Pool, error) {
	if !slices.ContainsFunc(waiting, func(j store.Job) bool { return j.PoolID != "" || j.ModelID != "" }) {
		return nil, nil
	}
	list, err := e.store.PoolList(ctx)
	if err != nil {
		return nil, fmt.Errorf("schedule jobs: read the pools: %w", err)
	}
	return poolsByID(list), nil
}

// route returns, for a job routed to a pool or a model, the pools of its live workers of the
// job's type on each of nodes that may take it (sorted), and those nodes; or, when none, the
// job's waiting reason. A model that no pool with such a worker serves writes an event the
// first time the job waits for one.
func (s *schedulePass) route(j *store.Job, nodes []string) (map[string][]string, []string, string) {
	routes := map[string][]string{}
	for _, w := range s.workers {
		if w.PoolID == "" || !slices.Contains(nodes, w.NodeID) || !runsType(w, j.Type) {
			continue
		}
		if j.PoolID != "" && w.PoolID != j.PoolID {
			continue
		}
		if j.ModelID != "" && s.pools[w.PoolID].ModelID != j.ModelID {
			continue
		}
		if s.pools[w.PoolID].Agent != j.Agent {
			continue // another agent's pool (checkRouted)
		}
		if !slices.Contains(routes[w.NodeID], w.PoolID) {
			routes[w.NodeID] = append(routes[w.NodeID], w.PoolID)
		}
	}
	if len(routes) > 0 {
		out := make([]string, 0, len(routes))
		for n, pools := range routes {
			slices.Sort(pools)
			out = append(out, n)
		}
		slices.Sort(out)
		return routes, out, ""
	}
	if j.PoolID != "" {
		return nil, nil, fmt.Sprintf("%s: no live worker of pool %s runs type %s on a node open to it", leases.ReasonNoWorker,
			j.PoolID, j.Type)
	}
	why := fmt.Sprintf("%s: no pool with a live worker of type %s serves model %q; it waits for one", ReasonNoPoolForModel,
		j.Type, j.ModelID)
	if !strings.HasPrefix(j.WaitingReason, ReasonNoPoolForModel) {
		s.events = append(s.events, s.event(j, EventModelUnserved, "", map[string]any{"model_id": j.ModelID, "type": j.Type}))
	}
	return nil, nil, why
}

// firstPool is the pool a GPU job routed by routes goes to on node: the first by id ("" for a
// job not routed).
func firstPool(routes map[string][]string, node string) string {
	if pools := routes[node]; len(pools) > 0 {
		return pools[0]
	}
	return ""
}

// warmRoutes are the pools of routes, on each node, with a live worker there that preloaded
// the job's model (its model_id, or its pool's model), and those nodes, sorted: the scheduler
// tries them first. Nil for a job whose model is not known.
func (s *schedulePass) warmRoutes(j *store.Job, routes map[string][]string) (map[string][]string, []string) {
	model := j.ModelID
	if model == "" && j.PoolID != "" {
		model = s.pools[j.PoolID].ModelID
	}
	if model == "" || routes == nil {
		return nil, nil
	}
	warm := map[string][]string{}
	for _, w := range s.workers {
		if w.WarmModel == model && slices.Contains(routes[w.NodeID], w.PoolID) && !slices.Contains(warm[w.NodeID], w.PoolID) {
			warm[w.NodeID] = append(warm[w.NodeID], w.PoolID)
		}
	}
	nodes := make([]string, 0, len(warm))
	for n, pools := range warm {
		slices.Sort(pools)
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	return warm, nodes
}

// onlyIn returns the nodes of some that are in nodes too.
func onlyIn(some, nodes []string) []string {
	return slices.DeleteFunc(slices.Clone(some), func(n string) bool { return !slices.Contains(nodes, n) })
}
