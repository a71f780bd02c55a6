package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// ReasonConstraints starts the waiting reason of a GPU job that no node with a live worker of
// its type passes the constraints of now.
const ReasonConstraints = "constraints"

// jobUse is what the jobs holding an active lease take, read once a pass inside its
// transaction (jobsPerNode) and kept up as the pass places.
type jobUse struct {
	byAgent map[string]map[string]map[string]int // type → agent → node → jobs (max_per_node)
	held    map[string]int                       // worker → the jobs it claimed, of any type
	placed  map[string]int                       // placement target → the jobs placed, not claimed
}

// add records n jobs of typ and agent on node, claimed by worker or placed at target.
func (u *jobUse) add(typ, agent, node, worker, target string, n int) {
	if u.byAgent[typ] == nil {
		u.byAgent[typ] = map[string]map[string]int{}
	}
	if u.byAgent[typ][agent] == nil {
		u.byAgent[typ][agent] = map[string]int{}
	}
	u.byAgent[typ][agent][node] += n
	if worker != "" {
		u.held[worker] += n
	} else {
		u.placed[target] += n
	}
}

// jobsPerNode reads, when a waiting job has max_per_node or needs no GPU (placed by worker
// slots), what the jobs with an active lease take (jobUse); nil otherwise. Inside the pass's
// transaction, after the GPU rows are locked. The counts can still grow under the pass: a
// worker claims unscheduled jobs of its types from their streams meanwhile, so a job placed on
// a slot that such a claim took waits in its node's stream until one frees, and its placement
// may expire (placement_expired) and be made again.
func jobsPerNode(ctx context.Context, tx store.Tx, waiting []store.Job) (*jobUse, error) {
	if !slices.ContainsFunc(waiting, func(j store.Job) bool {
		return j.GPUMemoryMB == 0 || (j.Constraints != nil && j.Constraints.MaxPerNode > 0)
	}) {
		return nil, nil
	}
	counts, err := tx.LeaseJobsPerNode(ctx)
	if err != nil {
		return nil, err
	}
	u := &jobUse{byAgent: map[string]map[string]map[string]int{}, held: map[string]int{}, placed: map[string]int{}}
	for _, c := range counts {
		u.add(c.Type, c.Agent, c.Node, c.Worker, c.Target, c.Jobs)
	}
	return u, nil
}

// constrain returns the nodes among nodes that j's constraints allow now, and when there are
// none, the waiting reason that says why of each (at most five named).
func (s *schedulePass) constrain(j *store.Job, nodes []string) ([]string, string) {
	c := j.Constraints
	var out, refused []string
	for _, n := range nodes {
		ok, rule := c.Matches(n, s.labels[n])
		if ok && c.MaxPerNode > 0 {
			if have := s.use.byAgent[j.Type][j.Agent][n]; have >= c.MaxPerNode {
				ok, rule = false, fmt.Sprintf("max_per_node: %d of type %s and agent %s there", have, j.Type, j.Agent)
			}
		}
		switch {
		case ok:
			out = append(out, n)
		case len(refused) < 5:
			refused = append(refused, fmt.Sprintf("%s (%s)", n, rule))
		}
	}
	if len(out) > 0 {
		return out, ""
	}
	more := ""
	if n := len(nodes) - len(refused); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return nil, fmt.Sprintf("%s: no node with a live worker of type %s passes them now: %s%s", ReasonConstraints, j.Type,
		strings.Join(refused, ", "), more)
}

// placeCPU places j, a job that needs no GPU (it is scheduled for its constraints or its
// route), where the most worker slots for it are free: on each of nodes, the free slots of
// the live workers of its type there (of the pools of routes[node], for a routed job), each
// worker's concurrency less the jobs of any type it holds, less the jobs placed there and not
// claimed yet. Ties go to the first node id, then pool id; a node where a lease of the job
// expired comes last; the nodes of workers warm for its model come first. So a placed job is
// claimed as soon as it is read, and a node's stream never holds more jobs than its workers
// can take. When every slot is taken the job waits, no_capacity, naming each node's slots.
func (s *schedulePass) placeCPU(j *store.Job, nodes []string, routes map[string][]string) error {
	if warmTo, warm := s.warmRoutes(j, routes); len(warm) > 0 {
		if t, _ := s.chooseCPU(j, onlyIn(warm, nodes), warmTo); t != nil {
			return s.placeOn(j, t.node, t.pool)
		}
	}
	t, full := s.chooseCPU(j, nodes, routes)
	if t != nil {
		return s.placeOn(j, t.node, t.pool)
	}
	s.wait(j, fmt.Sprintf("%s: every node that runs type %s has its worker slots taken (%s)", leases.ReasonNoCapacity,
		j.Type, strings.Join(full, ", ")))
	return nil
}

// cpuTarget is where placeCPU may place a job, and the slots free there.
type cpuTarget struct {
	node, pool string
	free       int
	avoided    bool
}

// chooseCPU returns placeCPU's choice among nodes (for the pools of routes, when not nil), or
// nil and the full targets (at most five).
func (s *schedulePass) chooseCPU(j *store.Job, nodes []string, routes map[string][]string) (*cpuTarget, []string) {
	var best *cpuTarget
	var full []string
	for _, n := range nodes {
		pools, all := routes[n], routes == nil
		if all {
			pools = []string{""}
		}
		for _, pool := range pools {
			free, slots := s.freeSlots(j.Type, n, pool, all)
			if free <= 0 {
				if len(full) < 5 {
					full = append(full, fmt.Sprintf("%s: %d of %d free", store.Target(n, pool), max(free, 0), slots))
				}
				continue
			}
			t := &cpuTarget{node: n, pool: pool, free: free, avoided: slices.Contains(s.avoid[j.ID], n)}
			if best == nil || (best.avoided && !t.avoided) || (t.avoided == best.avoided && t.free > best.free) {
				best = t
			}
		}
	}
	return best, full
}

// freeSlots is how many more jobs of typ the live workers on node (of pool, unless all) can
// take now, and their slots: each worker's concurrency less the jobs it holds, less the jobs
// placed for them and not claimed yet (on node, or for pool on node; all: anywhere on node).
func (s *schedulePass) freeSlots(typ, node, pool string, all bool) (free, slots int) {
	for _, w := range s.workers {
		if w.NodeID != node || (!all && w.PoolID != pool) || !runsType(w, typ) {
			continue
		}
		c := max(w.Concurrency, 1)
		slots += c
		free += max(c-s.use.held[w.ID], 0)
	}
	for target, n := range s.use.placed {
		tn, tp := store.SplitTarget(target)
		if tn == node && (all || tp == "" || tp == pool) {
			free -= n
		}
	}
	return free, slots
}

// runsType reports whether w runs typ (a worker that names no type runs every type).
func runsType(w store.Worker, typ string) bool {
	return len(w.Types) == 0 || slices.Contains(w.Types, typ)
}

// leaseMode is the mode of the lease a placement reserves for j: a GPU job's holds memory on
// its GPUs; another job's holds its node only.
func leaseMode(j *store.Job) store.LeaseMode {
	if j.GPUMemoryMB > 0 {
		return store.LeaseGPU
	}
	return store.LeaseCPU
}
