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

// leasedJobs counts the jobs of one type that hold an active lease (running, or placed): by
// agent and node (max_per_node), and by node and pool (worker slots; the pool of the worker
// that runs the job, or of the placement's target; "" for none).
type leasedJobs struct {
	byAgent map[string]map[string]int
	byPool  map[string]map[string]int
}

func newLeasedJobs() leasedJobs {
	return leasedJobs{byAgent: map[string]map[string]int{}, byPool: map[string]map[string]int{}}
}

func (l leasedJobs) add(agent, node, pool string, n int) {
	if l.byAgent[agent] == nil {
		l.byAgent[agent] = map[string]int{}
	}
	l.byAgent[agent][node] += n
	if l.byPool[node] == nil {
		l.byPool[node] = map[string]int{}
	}
	l.byPool[node][pool] += n
}

// of is how many of the type's jobs of agent hold a lease on node.
func (l leasedJobs) of(agent, node string) int { return l.byAgent[agent][node] }

// on is how many of the type's jobs hold a lease on node, for pool's workers ("" and all:
// every pool's).
func (l leasedJobs) on(node, pool string, all bool) int {
	if !all {
		return l.byPool[node][pool]
	}
	n := 0
	for _, c := range l.byPool[node] {
		n += c
	}
	return n
}

// workerSlots are the slots of one type's live workers: node → pool ("" for none) → slots.
type workerSlots map[string]map[string]int

func (w workerSlots) add(node, pool string, n int) {
	if w[node] == nil {
		w[node] = map[string]int{}
	}
	w[node][pool] += n
}

// on is the slots on node, of pool's workers (all: of every pool's).
func (w workerSlots) on(node, pool string, all bool) int {
	if !all {
		return w[node][pool]
	}
	n := 0
	for _, c := range w[node] {
		n += c
	}
	return n
}

// jobsPerNode reads, for the types of the waiting jobs that have max_per_node or need no GPU
// (placed by worker slots), how many jobs of the type hold an active lease on each node, by
// agent. Inside the pass's transaction, after the GPU rows are locked: only a pass places
// scheduled jobs, and every lease that ends makes a count smaller, so no count grows under
// the pass.
func jobsPerNode(ctx context.Context, tx store.Tx, waiting []store.Job) (map[string]leasedJobs, error) {
	var types []string
	for _, j := range waiting {
		if j.GPUMemoryMB == 0 || (j.Constraints != nil && j.Constraints.MaxPerNode > 0) {
			types = append(types, j.Type)
		}
	}
	if len(types) == 0 {
		return nil, nil
	}
	counts, err := tx.LeaseJobsPerNode(ctx, types)
	if err != nil {
		return nil, err
	}
	out := make(map[string]leasedJobs, len(types))
	for _, t := range types {
		out[t] = newLeasedJobs()
	}
	for _, c := range counts {
		if l, ok := out[c.Type]; ok {
			l.add(c.Agent, c.Node, c.Pool, c.Jobs)
		}
	}
	return out, nil
}

// constrain returns the nodes among nodes that j's constraints allow now, and when there are
// none, the waiting reason that says why of each (at most five named).
func (s *schedulePass) constrain(j *store.Job, nodes []string) ([]string, string) {
	c := j.Constraints
	var out, refused []string
	for _, n := range nodes {
		ok, rule := c.Matches(n, s.labels[n])
		if ok && c.MaxPerNode > 0 {
			if have := s.leased[j.Type].of(j.Agent, n); have >= c.MaxPerNode {
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
// route), where the most worker slots of its type are free: on each of nodes, the slots of the
// live workers of the type there (of the pools of routes[node], for a routed job), less the
// jobs of the type that hold a lease there (running, or placed and not yet claimed) for those
// workers. Ties go to the first node id, then pool id; a node where a lease of the job expired
// comes last. So a placed job is claimed as soon as it is read, and a node's stream never
// holds more of the type's jobs than its workers can take. When every slot is taken the job
// waits, no_capacity, naming each node's slots.
func (s *schedulePass) placeCPU(j *store.Job, nodes []string, routes map[string][]string) error {
	// The nodes where a worker is warm for the job's model first.
	if warm := s.warmNodes(j, routes); len(warm) > 0 && len(warm) < len(nodes) {
		if t, _ := s.chooseCPU(j, warm, routes); t != nil {
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

// chooseCPU returns placeCPU's choice among nodes, or nil and the full targets (at most five).
func (s *schedulePass) chooseCPU(j *store.Job, nodes []string, routes map[string][]string) (*cpuTarget, []string) {
	var best *cpuTarget
	var full []string
	for _, n := range nodes {
		pools, all := routes[n], routes == nil
		if all {
			pools = []string{""}
		}
		for _, pool := range pools {
			slots := s.slots[j.Type].on(n, pool, all) + s.slots["*"].on(n, pool, all)
			used := s.leased[j.Type].on(n, pool, all)
			if slots-used <= 0 {
				if len(full) < 5 {
					full = append(full, fmt.Sprintf("%s: %d of %d", store.Target(n, pool), used, slots))
				}
				continue
			}
			t := &cpuTarget{node: n, pool: pool, free: slots - used, avoided: slices.Contains(s.avoid[j.ID], n)}
			if best == nil || (best.avoided && !t.avoided) || (t.avoided == best.avoided && t.free > best.free) {
				best = t
			}
		}
	}
	return best, full
}

// leaseMode is the mode of the lease a placement reserves for j: a GPU job's holds memory on
// its GPUs; another job's holds its node only.
func leaseMode(j *store.Job) store.LeaseMode {
	if j.GPUMemoryMB > 0 {
		return store.LeaseGPU
	}
	return store.LeaseCPU
}
