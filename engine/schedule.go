package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// The scheduler's pass (the loop is package scheduler's, on the leader). It takes the pending
// GPU jobs that are due and not placed, in order (effective priority, then the longest wait),
// and for each picks a node whose live workers run the job's type and whose GPUs have room
// (leases.Cluster.Choose), reserves its lease there, and marks the job placed on that node, all
// in one fenced transaction that holds every GPU row locked. After the commit it publishes the
// placed jobs to their nodes' streams, where only those nodes' workers read; a worker's claim
// then adopts the lease (claim.go). A job that fits nowhere stays pending with its waiting
// reason, and the first in line that has waited ReserveAfter gets a node held for it.

// ReasonPlacementExpired starts the waiting reason of a job whose placement expired unclaimed.
const ReasonPlacementExpired = "placement_expired"

// Audit event types of the scheduler.
const (
	EventPlaced        = "job.placed"
	EventUnplaced      = "job.unplaced"
	EventUnsatisfiable = "job.unsatisfiable"
)

// PriorityAging is how long a waiting GPU job waits for its effective priority to rise by one
// level (up to MaxPriority): a stream of higher-priority jobs cannot hold a job back forever.
const PriorityAging = time.Minute

// EffectivePriority is the priority a job waiting since since ranks with at now.
func EffectivePriority(priority int, since, now time.Time) int {
	if now.After(since) {
		priority += int(now.Sub(since) / PriorityAging)
	}
	return min(priority, MaxPriority)
}

// Hold is the node held for one blocked job: no job behind it in line is placed there until it
// is. The zero Hold holds nothing.
type Hold struct {
	JobID string
	Node  string
}

// ScheduleParams configure one pass.
type ScheduleParams struct {
	// Fence guards the pass's transaction and its marks (the leader's term).
	Fence Fence
	// Batch bounds the waiting jobs considered (by priority and by age).
	Batch int
	// Policy picks among the nodes a job fits on (leases.PolicyBestFit by default).
	Policy leases.Policy
	// ReserveAfter is how long the first job in line may fit nowhere before a node is held
	// for it.
	ReserveAfter time.Duration
	// Held is the previous pass's hold, kept while its job is still the one blocked.
	Held Hold
}

// Placement is one job the pass placed.
type Placement struct {
	JobID, Type, Node string
	// Pool is the pool whose workers alone may claim the job there ("" for any).
	Pool string
	GPUs []int
	// Waited is how long the job waited, from its becoming available to its placement.
	Waited time.Duration
}

// ScheduleResult is what one pass did.
type ScheduleResult struct {
	Placed []Placement
	// Waiting counts the jobs left waiting by the kind of their reason (no_capacity,
	// no_fresh_telemetry, no_worker, unsatisfiable, reserved, node_unknown, telemetry_stale,
	// cordoned, quota, constraints, no_pool_for_model).
	Waiting map[string]int
	// Held is the hold to pass to the next pass.
	Held Hold
	// Published counts the placed jobs published to their node streams.
	Published int
	// Full reports that the pass saw as many waiting jobs as its batch: there may be more.
	Full bool
}

// Schedule runs one pass of the scheduler (see the top of this file).
func (e *Engine) Schedule(ctx context.Context, p ScheduleParams) (ScheduleResult, error) {
	now := e.nowUTC()
	batch := cmp.Or(p.Batch, 500)
	waiting, err := e.store.JobListSchedulable(ctx, store.SchedulableParams{Now: now, Limit: batch})
	if err != nil || len(waiting) == 0 {
		return ScheduleResult{Held: Hold{}}, err
	}
	nodes, workers, err := e.workerNodes(ctx)
	if err != nil {
		return ScheduleResult{}, err
	}
	pools, err := e.passPools(ctx, waiting)
	if err != nil {
		return ScheduleResult{}, err
	}
	cordoned, labels, err := e.registry(ctx)
	if err != nil {
		return ScheduleResult{}, err
	}
	nodes, closed := splitCordoned(nodes, cordoned)
	slices.SortStableFunc(waiting, func(a, b store.Job) int { return scheduleOrder(a, b, now) })
	avoid, err := e.avoidNodes(ctx, waiting)
	if err != nil {
		return ScheduleResult{}, err
	}
	var pass schedulePass
	err = e.fenced(ctx, p.Fence, func(tx store.Tx) error {
		pass = schedulePass{e: e, p: p, now: now, nodes: nodes, workers: workers, pools: pools, cordoned: closed,
			avoid: avoid, labels: labels, res: ScheduleResult{Waiting: map[string]int{}}}
		return pass.run(ctx, tx, waiting)
	})
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("schedule gpu jobs: %w", err)
	}
	res := pass.res
	res.Full = len(waiting) >= batch
	if len(pass.placed) > 0 {
		n, err := e.outbox.Publish(ctx, pass.placed, outbox.Mark{Fence: p.Fence})
		res.Published = n
		if err != nil {
			// The dispatcher publishes them: placed and not enqueued.
			return res, fmt.Errorf("publish placed jobs: %w", err)
		}
	}
	return res, nil
}

// scheduleOrder is the order a pass takes waiting jobs in: the highest effective priority
// first, then the longest wait. Jobs that became available at the same instant (one batch, or
// one group commit of concurrent submits) have no order of arrival between them: they go
// largest first (exclusive ones, then the most memory on each GPU, then the most GPUs), the
// first-fit-decreasing rule of bin packing. A large job placed early keeps the room it needs;
// taken last, it waits for a node to empty while the small ones fill every hole. The job id
// breaks the remaining ties.
func scheduleOrder(a, b store.Job, now time.Time) int {
	return cmp.Or(
		cmp.Compare(EffectivePriority(b.Priority, b.AvailableAt, now), EffectivePriority(a.Priority, a.AvailableAt, now)),
		a.AvailableAt.Compare(b.AvailableAt),
		cmp.Compare(boolInt(b.GPUExclusive), boolInt(a.GPUExclusive)),
		cmp.Compare(b.GPUMemoryMB, a.GPUMemoryMB),
		cmp.Compare(b.GPUCount(), a.GPUCount()),
		cmp.Compare(a.ID, b.ID))
}

// workerNodes returns, per job type, the nodes where a live worker (idle or executing) of the
// type runs, sorted, and the live workers. A worker that names no types runs every type ("*").
func (e *Engine) workerNodes(ctx context.Context) (nodes map[string][]string, live []store.Worker, err error) {
	ws, err := e.store.WorkerList(ctx, "", true)
	if err != nil {
		return nil, nil, fmt.Errorf("schedule jobs: %w", err)
	}
	nodes = map[string][]string{}
	for _, w := range ws {
		if w.NodeID == "" || (w.Status != store.WorkerIdle && w.Status != store.WorkerExecuting) {
			continue
		}
		live = append(live, w)
		for _, t := range workerTypes(w) {
			if !slices.Contains(nodes[t], w.NodeID) {
				nodes[t] = append(nodes[t], w.NodeID)
			}
		}
	}
	for t := range nodes {
		slices.Sort(nodes[t])
	}
	return nodes, live, nil
}

// workerTypes are the types w runs: "*" (every type) when it names none.
func workerTypes(w store.Worker) []string {
	if len(w.Types) == 0 {
		return []string{"*"}
	}
	return w.Types
}

// avoidNodes returns the nodes each waiting job had a lease expire on: its worker was lost
// there, or no worker there claimed its placement. Only a job that was attempted or placed
// before can have one.
func (e *Engine) avoidNodes(ctx context.Context, waiting []store.Job) (map[string][]string, error) {
	var ids []string
	for _, j := range waiting {
		if j.Attempts > 0 || strings.HasPrefix(j.WaitingReason, ReasonPlacementExpired) {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	avoid, err := e.store.LeaseExpiredNodes(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("schedule gpu jobs: %w", err)
	}
	return avoid, nil
}

// schedulePass is the state of one pass's transaction.
type schedulePass struct {
	e     *Engine
	p     ScheduleParams
	now   time.Time
	nodes map[string][]string // type → nodes of its live workers, cordoned ones left out
	// workers are the live workers; pools the pools, read when a waiting job is routed.
	workers []store.Worker
	pools   map[string]store.Pool
	// cordoned is type → the cordoned nodes of its live workers (schedule_cordon.go)
	cordoned map[string][]string
	avoid    map[string][]string // job → nodes where a lease of it expired

	// labels are the registered nodes' labels (node selectors), read with the cordons.
	labels map[string]map[string]string
	// use is what the jobs with an active lease take (max_per_node, worker slots), read when a
	// waiting job needs it, and kept up with the pass's placements.
	use *jobUse

	cluster *leases.Cluster
	quotas  *passQuotas // the agents' GPU quotas and holdings (quota.go)
	hold    Hold        // the node held from the held job on in line
	res     ScheduleResult
	placed  []store.Job
	leases  []store.Lease
	updates []store.JobUpdate
	events  []store.AuditEvent
	why     map[string][]string // reason → jobs whose waiting reason becomes it
}

func (s *schedulePass) run(ctx context.Context, tx store.Tx, waiting []store.Job) error {
	ids := make([]string, len(waiting))
	for i, j := range waiting {
		ids[i] = j.ID
	}
	// The jobs first, then the GPUs: the lock order of a claim.
	byID, err := jobsByID(ctx, tx, ids, true)
	if err != nil {
		return err
	}
	if s.cluster, err = s.e.leases.LockCluster(ctx, tx, s.now); err != nil {
		return err
	}
	if s.use, err = jobsPerNode(ctx, tx, waiting); err != nil {
		return err
	}
	if s.quotas, err = s.e.lockedQuotas(ctx, tx, waiting); err != nil { // after the GPU locks
		return err
	}
	// The placements' time is after the locks: a release that committed while the pass
	// waited for them, whose room it places on, is then before it, as the audit trail says.
	s.now = s.e.nowUTC()
	s.why = map[string][]string{}
	for _, w := range waiting {
		j := byID[w.ID]
		if j == nil || j.Status != store.JobPending || j.LeaseToken != "" || j.AvailableAt.After(s.now) {
			continue // moved on since it was listed
		}
		if err := s.place(j); err != nil {
			return err
		}
	}
	s.res.Held = s.hold
	if err := tx.LeaseInsert(ctx, s.leases); err != nil {
		return err
	}
	if len(s.updates) > 0 {
		if err := tx.JobUpdateMany(ctx, s.updates); err != nil {
			return err
		}
	}
	for why, ids := range s.why {
		if _, err := tx.JobSetWaiting(ctx, ids, why); err != nil {
			return err
		}
	}
	return tx.AuditInsert(ctx, s.events)
}

// place places j or records why it waits.
func (s *schedulePass) place(j *store.Job) error {
	req := leases.Request{MemoryMB: int64(j.GPUMemoryMB), GPUs: j.GPUCount(), Exclusive: j.GPUExclusive}
	nodes := s.nodesOf(j.Type)
	if s.waitCordoned(j, req, nodes) {
		return nil
	}
	if len(nodes) == 0 {
		where := "on a node that reports GPUs"
		if j.GPUMemoryMB == 0 {
			where = "on a node open to it"
		}
		s.wait(j, leases.ReasonNoWorker+": no live worker of type "+j.Type+" runs "+where)
		return nil
	}
	var routes map[string][]string // node → the pools the job may go to there
	if j.PoolID != "" || j.ModelID != "" {
		var why string
		if routes, nodes, why = s.route(j, nodes); len(nodes) == 0 {
			s.wait(j, why)
			return nil
		}
	}
	if !j.Constraints.Empty() {
		var why string
		if nodes, why = s.constrain(j, nodes); len(nodes) == 0 {
			s.wait(j, why)
			return nil
		}
	}
	if j.GPUMemoryMB == 0 {
		return s.placeCPU(j, nodes, routes)
	}
	if s.quotaWaits(j, "") {
		return nil
	}
	eligible := nodes
	if s.hold.Node != "" {
		eligible = slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == s.hold.Node })
	}
	policy := cmp.Or(s.p.Policy, leases.PolicyBestFit)
	if warmTo, warm := s.warmRoutes(j, routes); len(warm) > 0 {
		// The nodes where a worker is warm for the job's model first, for its pool.
		if node, err := s.cluster.Choose(req, onlyIn(warm, eligible), policy); err == nil {
			return s.placeOn(j, node, firstPool(warmTo, node))
		}
	}
	if avoid := s.avoid[j.ID]; len(avoid) > 0 {
		// Another node first: the job's worker was lost on these, or never came.
		others := slices.DeleteFunc(slices.Clone(eligible), func(n string) bool { return slices.Contains(avoid, n) })
		if node, err := s.cluster.Choose(req, others, policy); err == nil {
			return s.placeOn(j, node, firstPool(routes, node))
		}
	}
	node, err := s.cluster.Choose(req, eligible, policy)
	if err == nil {
		return s.placeOn(j, node, firstPool(routes, node))
	}
	d, ok := leases.IsDenial(err)
	if !ok {
		return err
	}
	why := d.Reason + ": " + d.Message
	if u := s.cluster.Unsatisfiable(req, nodes); u != "" {
		why = leases.ReasonUnsatisfiable + ": " + u + "; it waits for a node that can"
		if !strings.HasPrefix(j.WaitingReason, leases.ReasonUnsatisfiable) {
			s.events = append(s.events, s.event(j, EventUnsatisfiable, "", map[string]any{"reason": why}))
		}
		s.wait(j, why)
		return nil
	}
	switch {
	case s.hold.Node != "":
		why = fmt.Sprintf("%s: node %q is held for job %s, ahead in line; elsewhere: %s", leases.ReasonReserved,
			s.hold.Node, s.hold.JobID, why)
	case d.Reason == leases.ReasonNoCapacity && (s.p.Held.JobID == j.ID || s.now.Sub(j.AvailableAt) >= s.p.ReserveAfter):
		// The first job in line that fits nowhere, and has waited long enough: hold a node.
		node := s.p.Held.Node
		if s.p.Held.JobID != j.ID || !slices.Contains(nodes, node) {
			node = s.cluster.Hold(req, nodes)
		}
		if node != "" {
			s.hold = Hold{JobID: j.ID, Node: node}
			why += fmt.Sprintf("; node %q is held for it: no job behind it starts there until it does", node)
		}
	}
	s.wait(j, why)
	return nil
}

// placeOn reserves j's lease on node and plans its placement there, for pool's workers when
// pool is not "".
func (s *schedulePass) placeOn(j *store.Job, node, pool string) error {
	if s.quotaWaits(j, node) {
		return nil
	}
	meta, _ := json.Marshal(struct {
		Attempt  int    `json:"attempt"`
		PlacedBy string `json:"placed_by"`
	}{j.Attempts + 1, "scheduler"})
	lease, err := s.e.leases.Prepare(s.cluster.Node(node), leases.GrantParams{
		Agent: j.Agent, JobID: j.ID, NodeID: node, Mode: leaseMode(j), MemoryMB: int64(j.GPUMemoryMB),
		GPUs: j.GPUCount(), Exclusive: j.GPUExclusive, Metadata: meta,
	}, s.now)
	if err != nil {
		return fmt.Errorf("place job %s on node %s: %w", j.ID, node, err)
	}
	f, empty, target := false, "", store.Target(node, pool)
	s.updates = append(s.updates, store.JobUpdate{
		ID: j.ID, From: store.JobPending, To: store.JobPending,
		LeaseToken: &lease.Token, PlacedNode: &target, Enqueued: &f, WaitingReason: &empty, Now: s.now,
	})
	s.leases = append(s.leases, lease)
	s.quotas.add(lease)
	waited := max(s.now.Sub(j.AvailableAt), 0)
	s.events = append(s.events, s.event(j, EventPlaced, lease.Token, map[string]any{
		"node_id": node, "pool_id": pool, "gpu_indexes": lease.GPUIndexes, "lease": leases.GrantDetails(lease),
		"priority": j.Priority, "waited_ms": waited.Milliseconds(),
	}))
	placed := *j
	placed.LeaseToken, placed.PlacedNode, placed.Enqueued, placed.WaitingReason = lease.Token, target, false, ""
	s.placed = append(s.placed, placed)
	s.res.Placed = append(s.res.Placed, Placement{JobID: j.ID, Type: j.Type, Node: node, Pool: pool, GPUs: lease.GPUIndexes,
		Waited: waited})
	if s.hold.JobID == j.ID {
		s.hold = Hold{}
	}
	if s.use != nil {
		s.use.add(j.Type, j.Agent, node, "", target, 1)
	}
	return nil
}

// wait records why j waits: its waiting reason when it changed, and the pass's count.
func (s *schedulePass) wait(j *store.Job, why string) {
	kind, _, _ := strings.Cut(why, ":")
	s.res.Waiting[kind]++
	if why != j.WaitingReason {
		s.why[why] = append(s.why[why], j.ID)
	}
}

// nodesOf returns the nodes with a live worker of typ.
func (s *schedulePass) nodesOf(typ string) []string { return nodesFor(s.nodes, typ) }

func (s *schedulePass) event(j *store.Job, typ, token string, details map[string]any) store.AuditEvent {
	raw, _ := json.Marshal(details)
	return store.AuditEvent{TS: s.now, EventType: typ, JobID: j.ID, LeaseToken: token, Actor: rescueActor, Details: raw}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
