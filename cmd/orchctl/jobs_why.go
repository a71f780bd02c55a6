package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newJobsWhyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "why JOB_ID",
		Short: "Say why a job is where it is: what a pending job waits for",
		Long: `Say in one line why a job is where it is.

A pending GPU job that a worker's node could not place says why (its waiting reason: the lease
denial, e.g. "no_capacity: no GPU of node "n1" has 30000 MB free ... the most is 20557 MB on
GPU 0"); a pending job without one waits for a worker of its type to read it, or for its retry
backoff. A claimed or running job names its worker; a finished one its end.`,
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
	case "pending":
		switch {
		case j.WaitingReason != "":
			return "waits for a place: " + j.WaitingReason
		case j.AvailableAt.After(now):
			return "waits for its retry backoff, until " + fmtTime(j.AvailableAt, now)
		case j.GPUMemoryMB > 0:
			return "waits for a worker of type " + j.Type + " on a node with " + gpuRequest(j) + " free"
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
