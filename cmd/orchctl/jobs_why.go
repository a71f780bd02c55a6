package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/nodelabels"
)

func newJobsWhyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "why JOB_ID",
		Short: "Say why a job is where it is: what a pending job waits for",
		Long: `Say in one line why a job is where it is.

A pending GPU job waits for the leader's scheduler to place it; the scheduler writes down why
it could not (the job's waiting_reason, "KIND: DETAILS"), and why says what each kind means,
the details after it in parentheses:

  no_capacity         no node that runs the job's type has the memory free now; it is placed
                      as soon as jobs there end ("orchctl gpus" shows who holds it)
  reserved            the node it would go to is held for an older job, ahead in line
  no_fresh_telemetry  the nodes that run its type have not reported their GPUs lately
  no_worker           no live worker of its type runs on a node with GPUs
  unsatisfiable       no node that runs its type could hold it even idle
  constraints         no node that runs its type passes the job's constraints now
                      (node_selector, allow_nodes, deny_nodes, max_per_node)
  no_pool_for_model   no pool with a live worker of its type serves the job's model
  placement_expired   it was placed, but no worker of that node claimed it in time
  cordoned            the only nodes that could run it are cordoned ("orchctl nodes list")
  quota               its agent holds as many GPUs or as much GPU memory as its admission
                      policy allows (max_gpus, max_gpu_memory_mb); it is placed as soon as
                      the agent's jobs or leases end ("orchctl admission get" shows quotas)
  node_unknown, telemetry_stale
                      a worker's node refused it at its claim (the scheduler is disabled)

A pending job the scheduler placed names its node (placed_node): its GPUs are reserved there
and a worker of that node claims it next. A pending job with no reason waits for a worker of
its type to read it, or for its retry backoff. A claimed or running job names its worker; a
finished one its end.`,
		Example: `  orchctl jobs why j0191f3c...`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: g.onJob(func(w io.Writer, job client.Job) error {
			if g.json() {
				return writeJSON(w, struct {
					JobID  string `json:"job_id"`
					Status string `json:"status"`
					Why    string `json:"why"`
				}{job.JobID, job.Status, g.why(job)})
			}
			_, err := fmt.Fprintf(w, "%s %s: %s\n", job.JobID, job.Status, g.why(job))
			return err
		}),
	}
}

// why says in words why job is where it is.
func (g *globals) why(j client.Job) string {
	now := g.now()
	switch j.Status {
	case statusAwaitingApproval:
		return "held for approval by a policy: nothing runs it until an approver approves it " +
			"(orchctl approvals list); a rejection or the request's expiry cancels it"
	case statusWaiting:
		if len(j.FanOutChildren) > 0 {
			return "a fan-out parent: it never runs itself, and ends once its children have ended (" +
				nodelabels.String(j.FanOutChildren) + ")"
		}
		return "waits for the jobs it depends on to end done: " + orDash(strings.Join(j.DependsOn, ", ")) +
			"; one that fails cancels it, unless on_parent_failure is run"
	case "pending":
		switch {
		case j.PlacedNode != "" && j.GPUMemoryMB == 0:
			return "placed on node " + placedOn(j) + ": waits for a worker of type " + j.Type + " on that node to claim it"
		case j.PlacedNode != "":
			return "placed on node " + placedOn(j) + ", its GPUs reserved there: waits for a worker of type " + j.Type +
				" on that node to claim it"
		case j.WaitingReason != "":
			return waitingWhy(j)
		case j.AvailableAt.After(now):
			return "waits for its retry backoff, until " + fmtTime(j.AvailableAt, now)
		case j.GPUMemoryMB > 0:
			return "waits to be placed on a node with " + gpuRequest(j) + " free, where a worker of type " + j.Type + " runs"
		}
		return "waits for a worker of type " + j.Type + " to read it"
	case "claimed":
		return "claimed by worker " + j.WorkerID + ", starting"
	case "running":
		return "running on worker " + j.WorkerID + ", since " + fmtTimePtr(j.StartedAt, now)
	case "done", "cancelled":
		return "finished " + fmtTimePtr(j.FinishedAt, now)
	case "dead_letter":
		return "its attempts are used up (" + attempts(j) + "); the last failed with: " + orDash(truncate(j.LastError, maxFieldValue))
	}
	return j.Status
}

// waitingWhy explains the waiting reason of a pending job, "KIND: DETAILS" as the scheduler (or
// a worker's claim) wrote it: a sentence for the kind, then the reason itself.
func waitingWhy(j client.Job) string {
	kind, _, _ := strings.Cut(j.WaitingReason, ":")
	var what string
	switch kind {
	case "no_capacity":
		what = "waits for GPU memory: no node that runs type " + j.Type + " has room for it now; " +
			"it is placed as soon as jobs there end"
	case "reserved":
		what = "waits its turn: the node it would go to is held for an older job, ahead in line, " +
			"so that job is not overtaken forever"
	case "no_fresh_telemetry":
		what = "waits for GPU telemetry: the nodes that run type " + j.Type + " have not reported their GPUs lately, " +
			"so where it fits is not known; see orchctl gpus"
	case "no_worker":
		what = "waits for a worker: no live worker of type " + j.Type + " runs on a node with GPUs"
	case "unsatisfiable":
		what = "cannot be placed as the cluster is: no node that runs type " + j.Type + " could hold it even idle; " +
			"cancel it, or add a node that can"
	case "no_pool_for_model":
		what = "waits for a pool of its model: none with a live worker of type " + j.Type + " serves " + j.ModelID +
			"; start one (orchctl pools)"
	case "constraints":
		what = "waits for a node its constraints allow: none that runs type " + j.Type + " passes them now " +
			"(orchctl nodes list shows the nodes' labels)"
	case "placement_expired":
		what = "waits to be placed again: it was placed, but no worker of that node claimed it in time"
	case "cordoned":
		what = "waits for an uncordon: the only nodes that could run type " + j.Type + " are cordoned; " +
			"see orchctl nodes list"
	case "quota":
		what = "waits for its agent's GPU quota: agent " + j.Agent + " holds what its admission policy allows; " +
			"it is placed as soon as the agent's other GPU jobs or leases end"
	case "node_unknown", "telemetry_stale":
		what = "waits for a place: the node of the worker that read it could not take it"
	default:
		return "waits for a place: " + j.WaitingReason
	}
	return what + " (" + j.WaitingReason + ")"
}

// gpuRequest says what j asks of the GPUs: "30000 MB on 2 GPUs, exclusive".
func gpuRequest(j client.Job) string {
	n := max(j.GPUs, 1)
	s := strconv.Itoa(j.GPUMemoryMB) + " MB on " + strconv.Itoa(n) + " GPU"
	if n > 1 {
		s += "s"
	}
	if j.GPUExclusive {
		s += ", exclusive"
	}
	return s
}
