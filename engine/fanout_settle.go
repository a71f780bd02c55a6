package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// Fan-out strategies (FanOut.Strategy).
const (
	// StrategyFailFast (the default): the first child that fails cancels the children still
	// pending or running, and the parent fails.
	StrategyFailFast = "fail_fast"
	// StrategyContinue: every child runs to its end; the parent fails if any did.
	StrategyContinue = "continue"
)

// settleFanOut decides a fan-out parent (locked, waiting) from its children (parents, in
// job_deps' terms): once every child has ended it ends done (every child done) or failed then
// dead_letter, with the children's results by node as its result; a fail_fast parent whose
// child failed cancels the children still going first.
func (e *Engine) settleFanOut(ctx context.Context, tx store.Tx, job *store.Job, children []store.JobParent, now time.Time,
	res *ResolveResult) ([]store.AuditEvent, error) {
	var going []string
	failed := 0
	for _, c := range children {
		switch {
		case !c.Ended():
			going = append(going, c.ParentID)
		case !c.Succeeded():
			failed++
		}
	}
	failFast := !job.Flow.Has(store.FlowTolerant)
	var events []store.AuditEvent
	switch {
	case len(going) == 0:
	case failed > 0 && failFast:
		evs, err := e.cancelJobs(ctx, tx, going, actorLeader, "fan-out "+job.ID+" failed fast", now)
		if err != nil {
			return nil, err
		}
		res.ChildrenCancelled += len(going)
		events = evs
		for i := range children {
			if !children[i].Ended() {
				children[i].Status = store.JobCancelled
			}
		}
	default:
		return nil, nil // children still going
	}
	result, summary := e.fanOutResult(job, children)
	if failed == 0 && summary.Cancelled == 0 && summary.Gone == 0 {
		res.FanOutsDone++
		ev, err := transition(ctx, tx, change{job: job, actor: actorLeader,
			update:  store.JobUpdate{To: store.JobDone, Result: result, FinishedAt: &now, Now: now},
			details: map[string]any{"children": len(children), "done": summary.Done}})
		return append(events, ev), err
	}
	res.FanOutsFailed++
	msg := fmt.Sprintf("fan-out failed (%s): %d of %d children done, %d failed, %d cancelled", strategyOf(job),
		summary.Done, len(children), summary.Failed, summary.Cancelled)
	f := false
	evs, err := transitionAll(ctx, tx, []plan{{job: job, actor: actorLeader, steps: []step{
		{update: store.JobUpdate{To: store.JobFailed, LastError: &msg, Result: result, Now: now},
			details: map[string]any{"error": msg}},
		{update: store.JobUpdate{To: store.JobDeadLetter, FinishedAt: &now, Enqueued: &f, Now: now},
			details: map[string]any{"reason": "fan-out failed"}},
	}}})
	return append(events, evs...), err
}

// cancelFlowOf is what cancelling job takes with it: its open approval request, a fan-out
// parent's children still going.
func (e *Engine) cancelFlowOf(ctx context.Context, tx store.Tx, job *store.Job, actor string, now time.Time) ([]store.AuditEvent, error) {
	if err := withdrawApproval(ctx, tx, job, now); err != nil {
		return nil, err
	}
	if !job.Flow.Has(store.FlowFanOut) {
		return nil, nil
	}
	children, err := tx.JobParents(ctx, []string{job.ID}, 0)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range children {
		if !c.Ended() {
			ids = append(ids, c.ParentID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return e.cancelJobs(ctx, tx, ids, actor, "fan-out "+job.ID+" cancelled", now)
}

// fanOutSummary counts a fan-out's children by how they ended.
type fanOutSummary struct {
	Done      int `json:"done"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Gone      int `json:"gone,omitempty"`
}

// fanOutNode is one child in a fan-out parent's result.
type fanOutNode struct {
	JobID     string          `json:"job_id"`
	Status    string          `json:"status"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
}

// fanOutResult is a fan-out parent's result: its strategy, the counts, and each child by node
// with its result, within flows.parent_results_max_bytes of results in all (a result that
// does not fit is left out and flagged).
func (e *Engine) fanOutResult(job *store.Job, children []store.JobParent) (json.RawMessage, fanOutSummary) {
	var sum fanOutSummary
	nodes := make(map[string]fanOutNode, len(children))
	left := e.cfg.Flows.ParentResultsMaxBytes
	for _, c := range children {
		n := fanOutNode{JobID: c.ParentID, Status: endedAs(c)}
		switch c.Status {
		case store.JobDone:
			sum.Done++
		case store.JobCancelled:
			sum.Cancelled++
		case "":
			sum.Gone++
		default:
			sum.Failed++
			n.Error = truncate(c.LastError, 512)
		}
		switch {
		case c.ResultBytes == 0:
		case c.Result != nil && len(c.Result) <= left:
			n.Result, left = c.Result, left-len(c.Result)
		default:
			n.Truncated = true
		}
		nodes[cmpOr(c.Label, c.ParentID)] = n
	}
	raw, _ := json.Marshal(struct {
		Strategy string                `json:"strategy"`
		Nodes    map[string]fanOutNode `json:"nodes"`
		fanOutSummary
	}{strategyOf(job), nodes, sum})
	return raw, sum
}

// strategyOf is a fan-out parent's strategy, from its flow bits.
func strategyOf(job *store.Job) string {
	if job.Flow.Has(store.FlowTolerant) {
		return StrategyContinue
	}
	return StrategyFailFast
}

// cmpOr is the first of a, b that is not empty.
func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
