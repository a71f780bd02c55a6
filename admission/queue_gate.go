package admission

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// queueGate caps the backlog (pending jobs) of the job types that have a queue_limit.
//
// Counting pending rows per submit would put a query on the hot path, so the backlog is
// counted once per refresh, and this instance adds what that count cannot include: the
// submits it admitted that are still being written (inflight, by job id), and those it
// finished writing while a count ran. Every job of this instance is counted exactly once: the
// count leaves out the ids in flight when it began (JobCountPending's excludeIDs), and the
// jobs those ids become stay in the local figure until the next count, which includes them.
// Other instances' submits reach the figure with their count, within one refresh interval:
// with N instances a limit can be overshot by what the other N-1 admit in one interval, which
// their agents' buckets bound. Safe for concurrent use.
type queueGate struct {
	limits map[string]int // type → queue_limit, only the limited types

	mu         sync.Mutex
	counted    map[string]int            // pending rows at the last count
	inflight   map[string]map[string]int // type → job id → submits of it being written
	done       map[string]int            // written since the last count began, not in it
	counting   bool                      // a count is running: finished submits go to doneDuring
	doneDuring map[string]int
	countedAt  time.Time
}

func newQueueGate(limits map[string]int) *queueGate {
	return &queueGate{limits: limits, counted: map[string]int{}, inflight: map[string]map[string]int{},
		done: map[string]int{}, doneDuring: map[string]int{}}
}

// types returns the limited types, sorted: what the refresh counts.
func (q *queueGate) types() []string {
	return slices.Sorted(maps.Keys(q.limits))
}

// limited reports whether typ has a queue_limit.
func (q *queueGate) limited(typ string) bool {
	_, ok := q.limits[typ]
	return ok
}

func (q *queueGate) backlog(typ string) int {
	n := q.counted[typ] + q.done[typ] + q.doneDuring[typ]
	for _, k := range q.inflight[typ] {
		n += k
	}
	return n
}

// tryAdmit takes a place in typ's queue for job id: it reports false, taking nothing, when the
// backlog is at the limit. Types without a limit always have room.
func (q *queueGate) tryAdmit(typ, id string) bool {
	limit, ok := q.limits[typ]
	if !ok {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.backlog(typ) >= limit {
		return false
	}
	if q.inflight[typ] == nil {
		q.inflight[typ] = map[string]int{}
	}
	q.inflight[typ][id]++
	return true
}

// finish ends a place taken by tryAdmit: pending reports that a pending job of the id exists
// now (written by the submit, or an existing job of a repeated id), which stays in the backlog
// until a count includes it; otherwise (a later check refused the submit, the engine failed,
// the existing job is past pending) the place is given back.
func (q *queueGate) finish(typ, id string, pending bool) {
	if !q.limited(typ) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if ids := q.inflight[typ]; ids[id] > 0 {
		if ids[id]--; ids[id] == 0 {
			delete(ids, id)
		}
	}
	switch {
	case !pending:
	case q.counting:
		q.doneDuring[typ]++
	default:
		q.done[typ]++
	}
}

// beginCount is called right before the backlog query and returns the ids it must leave out:
// the submits in flight. Every job written before now is committed, so the query counts it.
func (q *queueGate) beginCount() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counting = true
	var ids []string
	for _, byID := range q.inflight {
		for id := range byID {
			ids = append(ids, id)
		}
	}
	return ids
}

// endCount installs the result of the count (nil counts: the count failed, keep the old one).
func (q *queueGate) endCount(counts map[string]int, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counting = false
	if counts == nil {
		for typ, n := range q.doneDuring {
			q.done[typ] += n
		}
		clear(q.doneDuring)
		return
	}
	for typ := range q.limits {
		q.counted[typ] = counts[typ]
	}
	// What was written before the count began is in it now; what finished while it ran was in
	// flight when it began, so left out of it: that stays local until the next count.
	q.done, q.doneDuring = q.doneDuring, q.done
	clear(q.doneDuring)
	q.countedAt = at
}

// QueueState is the backlog of one limited type.
type QueueState struct {
	Type    string
	Backlog int // pending rows at the last count plus this instance's submits it cannot include yet
	Limit   int
	Full    bool
	// CPUFallback is where the type's jobs go while it is full (empty: they are refused).
	CPUFallback string
}

// state returns the limited types' backlogs, by type, and when they were last counted.
func (q *queueGate) state() ([]QueueState, time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]QueueState, 0, len(q.limits))
	for _, typ := range slices.Sorted(maps.Keys(q.limits)) {
		n := q.backlog(typ)
		out = append(out, QueueState{Type: typ, Backlog: n, Limit: q.limits[typ], Full: n >= q.limits[typ]})
	}
	return out, q.countedAt
}
