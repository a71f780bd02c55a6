package api

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// jobToWire converts a job row to its wire form. Times are shown in UTC.
func jobToWire(j store.Job) wire.Job {
	return wire.Job{
		JobID:         j.ID,
		Type:          j.Type,
		Agent:         j.Agent,
		Payload:       rawOrNil(j.Payload),
		Status:        string(j.Status),
		Attempts:      j.Attempts,
		MaxAttempts:   j.MaxAttempts,
		AvailableAt:   j.AvailableAt.UTC(),
		Enqueued:      j.Enqueued,
		StreamID:      j.StreamID,
		OwnerPool:     j.OwnerPool,
		WorkerID:      j.WorkerID,
		GPUMemoryMB:   j.GPUMemoryMB,
		GPUs:          j.GPUCount(),
		GPUExclusive:  j.GPUExclusive && j.GPUMemoryMB > 0,
		WaitingReason: waitingReason(j),
		PlacedNode:    placedNode(j),
		PlacedPool:    placedPool(j),
		PoolID:        j.PoolID,
		ModelID:       j.ModelID,
		Constraints:   constraintsToWire(j.Constraints),
		Priority:      j.Priority,
		Timeout:       wire.Duration(j.Timeout),
		Result:        rawOrNil(j.Result),
		LastError:     j.LastError,
		CreatedAt:     j.CreatedAt.UTC(),
		UpdatedAt:     j.UpdatedAt.UTC(),
		StartedAt:     utcPtr(j.StartedAt),
		FinishedAt:    utcPtr(j.FinishedAt),
		CallbackURL:   j.CallbackURL,
	}
}

// waitingReason is j's waiting reason while it is pending.
func waitingReason(j store.Job) string {
	if j.Status != store.JobPending {
		return ""
	}
	return j.WaitingReason
}

// placedNode is the node j is placed on while it is pending (a claim clears it).
func placedNode(j store.Job) string {
	if j.Status != store.JobPending {
		return ""
	}
	node, _ := store.SplitTarget(j.PlacedNode)
	return node
}

// placedPool is the pool j is placed for while it is pending ("" for any worker of its node).
func placedPool(j store.Job) string {
	if j.Status != store.JobPending {
		return ""
	}
	_, pool := store.SplitTarget(j.PlacedNode)
	return pool
}

// constraintsToWire is a job's constraints as the API shows them (nil: none).
func constraintsToWire(c *store.Constraints) *wire.Constraints {
	if c.Empty() {
		return nil
	}
	return &wire.Constraints{NodeSelector: c.NodeSelector, AllowNodes: c.AllowNodes, DenyNodes: c.DenyNodes, MaxPerNode: c.MaxPerNode}
}

// rawOrNil keeps an empty raw message out of the JSON (an empty RawMessage does not marshal).
func rawOrNil(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	return m
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// claimedToWire converts the jobs a claim took, with their leases and the parents of those
// that have some. The attempt of a claimed job is its attempt count, which the claim
// incremented.
func claimedToWire(jobs []store.Job, leases map[string]store.Lease, parents map[string][]engine.Parent) []wire.ClaimedJob {
	out := make([]wire.ClaimedJob, 0, len(jobs))
	for _, j := range jobs {
		payload := j.Payload
		if len(payload) == 0 {
			payload = json.RawMessage("null")
		}
		cj := wire.ClaimedJob{
			JobID:      j.ID,
			Type:       j.Type,
			Payload:    payload,
			Attempt:    j.Attempts,
			Timeout:    wire.Duration(j.Timeout),
			LeaseToken: j.LeaseToken,
		}
		if l, ok := leases[j.ID]; ok {
			expires := l.ExpiresAt.UTC()
			cj.GPUIndex, cj.GPUIndexes, cj.LeaseTTL, cj.LeaseExpiresAt = l.GPUIndex, l.GPUIndexes, wire.Duration(l.TTL), &expires
			if l.GPUIndex != nil {
				cj.GPUMemoryMB = l.MemoryMB
			}
		}
		for _, p := range parents[j.ID] {
			cj.Parents = append(cj.Parents, wire.Parent(p))
		}
		out = append(out, cj)
	}
	return out
}

// convertAll converts every element of xs with f.
func convertAll[A, B any](xs []A, f func(A) B) []B {
	out := make([]B, 0, len(xs))
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

func refusalsToWire(rs []engine.Refusal) []wire.ClaimRefusal {
	return convertAll(rs, func(r engine.Refusal) wire.ClaimRefusal { return wire.ClaimRefusal(r) })
}

func claimItemsFromWire(items []wire.ClaimItem) []engine.ClaimItem {
	return convertAll(items, func(it wire.ClaimItem) engine.ClaimItem {
		return engine.ClaimItem{JobID: it.JobID, Stream: it.Stream, MessageID: it.MessageID}
	})
}

func resultsFromWire(rs []wire.JobResult) []engine.Result {
	out := make([]engine.Result, 0, len(rs))
	for _, r := range rs {
		out = append(out, engine.Result{
			JobID:        r.JobID,
			Attempt:      r.Attempt,
			LeaseToken:   r.LeaseToken,
			Done:         r.Status == wire.ResultDone,
			Output:       rawOrNil(r.Result),
			Error:        r.Error,
			NonRetryable: r.NonRetryable,
			Elapsed:      time.Duration(r.ElapsedUS) * time.Microsecond,
			// decodeJSON has checked it: a json.RawMessage holds a value the decoder read.
			OutputChecked: true,
		})
	}
	return out
}

func outcomesToWire(os []engine.Outcome) []wire.CompleteOutcome {
	out := make([]wire.CompleteOutcome, 0, len(os))
	for _, o := range os {
		out = append(out, wire.CompleteOutcome{JobID: o.JobID, Outcome: o.Outcome, Status: string(o.Status)})
	}
	return out
}

// encodeCursor makes the opaque cursor of a listing position: base64url of
// "<created_at unix nanoseconds>,<job_id>".
func encodeCursor(j store.Job) string {
	raw := strconv.FormatInt(j.CreatedAt.UnixNano(), 10) + "," + j.ID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodeCursor parses a cursor made by encodeCursor.
func decodeCursor(s string) (*store.JobCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, badRequest("cursor", "malformed cursor: pass next_cursor of the previous page as is")
	}
	ns, id, ok := strings.Cut(string(raw), ",")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || !engine.JobIDPattern.MatchString(id) {
		return nil, badRequest("cursor", "malformed cursor: pass next_cursor of the previous page as is")
	}
	return &store.JobCursor{CreatedAt: time.Unix(0, n).UTC(), ID: id}, nil
}
