package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newAdmissionCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "admission",
		Short: "Show and change admission control: per-agent rate limits and the cluster's gates",
		Long: `Show and change admission control (admin token).

Every submit and lease request passes admission before anything is written: the GPU-pressure
gate (GPU job types and GPU leases are refused while the cluster's GPU memory is above the high
watermark), the queue-depth gate of the job's type, then the agent's policy: a cap on its
unfinished jobs (max_pending) and a token bucket (rate_per_sec, burst) shared by every
orchestrator instance. A refusal is a 429 with Retry-After and the reason.

An agent without a policy of its own gets the default policy: the configured one, until a policy
of the agent "*" is stored. Every instance rereads the policies within
admission.refresh_interval, so a change reaches the whole cluster within it.`,
	}, newAdmissionGetCmd(g), newAdmissionSetCmd(g), newAdmissionDeleteCmd(g), newAdmissionRestoreCmd(g))
}

func newAdmissionGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "Show the policies, the gates and the limiter",
		Long: `Show admission control as the answering instance sees it (GET /control/admission): the default
policy and every agent's, the GPU-pressure gate with the pressure per node, the job types'
queue backlogs against their queue_limit, and whether the limiter's Redis answers.

What to look for:
  - GPU GATE closed: GPU work is refused with gpu_pressure until the pressure falls below the low
    watermark and the hold has passed ("orchctl gpus" shows which GPUs are full);
  - a queue FULL: submits of that type are refused (queue_full) or routed to its cpu_fallback;
  - LIMITER down: Redis does not answer; GPU work is refused, CPU work admitted unlimited (as
    admission.limiter_down_gpu / _cpu say).

Save it before an emergency change ("-o json > admission-before.json") to put it back later with
"orchctl admission restore". With -o json the one document is the API's answer.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			st, err := c.GetAdmission(cmd.Context())
			if err != nil {
				return err
			}
			if st.Policies == nil {
				st.Policies = []client.AdmissionPolicy{}
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			return g.printAdmission(cmd.OutOrStdout(), st)
		},
	}
}

// printAdmission prints the admission state: a summary, then the policies, nodes and queues.
func (g *globals) printAdmission(out io.Writer, st client.AdmissionStatus) error {
	now := g.now()
	gate := st.GPU
	gateLine := fmt.Sprintf("%s: %s used (%s of %s, %d fresh GPUs, %d stale); closes above %s, reopens below %s after %s",
		gate.State, fmtPct(gate.PressurePct), fmtMB(gate.UsedMB), fmtMB(gate.TotalMB), gate.FreshGPUs, gate.StaleGPUs,
		fmtPct(gate.HighWatermarkPct), fmtPct(gate.LowWatermarkPct), time.Duration(gate.Hold))
	limiter := st.Limiter.State
	if st.Limiter.State != "up" {
		limiter += " since " + fmtRelativePtr(st.Limiter.DownSince, now) + ": " + st.Limiter.Error
	}
	limiter += " (while down: gpu work " + st.Limiter.OnDownGPU + ", cpu work " + st.Limiter.OnDownCPU + ")"
	t := newTable(out)
	t.row("ENABLED", yesNo(st.Enabled))
	t.row("DEFAULT POLICY", fmtPolicy(st.DefaultPolicy)+" (from "+st.DefaultSource+")")
	t.row("GPU GATE", gateLine)
	if gate.State == client.GateClosed {
		t.row("GATE CLOSED", "since "+fmtRelativePtr(gate.ClosedSince, now)+", held until "+fmtRelativePtr(gate.HoldUntil, now))
	}
	t.row("LIMITER", limiter)
	t.row("REFRESH", time.Duration(st.RefreshInterval).String()+", policies loaded "+fmtRelativePtr(st.PoliciesLoadedAt, now))
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if len(st.Policies) == 0 {
		fmt.Fprintln(out, "no agent has a policy of its own")
	} else {
		t = newTable(out, "AGENT", "RATE/S", "BURST", "MAX PENDING", "GPU QUOTA", "ENABLED", "UPDATED")
		for _, p := range st.Policies {
			t.row(p.Agent, fmtFloat(p.RatePerSec), strconv.Itoa(p.Burst), maxPending(p.MaxPending), gpuQuota(p), yesNo(p.Enabled),
				fmtRelativePtr(p.UpdatedAt, now))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(gate.Nodes) > 0 {
		fmt.Fprintln(out)
		t = newTable(out, "NODE", "PRESSURE", "USED", "TOTAL", "GPUS", "FRESH", "AGE")
		for _, n := range gate.Nodes {
			t.row(n.NodeID, fmtPct(n.PressurePct), fmtMB(n.UsedMB), fmtMB(n.TotalMB), strconv.Itoa(n.GPUs), yesNo(n.Fresh),
				time.Duration(n.Age).Round(time.Millisecond).String())
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(st.Queues) > 0 {
		fmt.Fprintln(out)
		t = newTable(out, "TYPE", "BACKLOG", "LIMIT", "FULL", "CPU FALLBACK")
		for _, q := range st.Queues {
			t.row(q.Type, strconv.Itoa(q.Backlog), strconv.Itoa(q.Limit), yesNo(q.Full), orDash(q.CPUFallback))
		}
		return t.flush()
	}
	return nil
}

// fmtPolicy shows a policy on one line: "5000/s burst 10000, max_pending none, enabled".
func fmtPolicy(p client.AdmissionPolicy) string {
	state := "enabled"
	if !p.Enabled {
		state = "disabled (exempt)"
	}
	quota := ""
	if p.MaxGPUs > 0 || p.MaxGPUMemoryMB > 0 {
		quota = ", gpu quota " + gpuQuota(p) + " per agent"
	}
	return fmt.Sprintf("%s/s burst %d, max_pending %s%s, %s", fmtFloat(p.RatePerSec), p.Burst, maxPending(p.MaxPending), quota, state)
}

// gpuQuota shows a policy's GPU quota: "2 GPUs, 80.0G", "none" when it has no cap.
func gpuQuota(p client.AdmissionPolicy) string {
	var parts []string
	if p.MaxGPUs > 0 {
		parts = append(parts, strconv.Itoa(p.MaxGPUs)+" GPUs")
	}
	if p.MaxGPUMemoryMB > 0 {
		parts = append(parts, fmtMB(p.MaxGPUMemoryMB))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// maxPending shows a max_pending: "none" for 0 (no cap).
func maxPending(n int) string {
	if n == 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

func newAdmissionDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete AGENT",
		Short: "Delete an agent's policy: it falls back to the default policy",
		Long: `Delete an agent's own policy (DELETE /control/admission/{agent}): the agent falls back to the
default policy. Deleting the policy of "*" brings back the configured default policy. An agent
without a policy of its own is a 404 (exit code 2).`,
		Example: `  orchctl admission delete batch-embedder
  orchctl admission delete '*'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			if err := c.DeleteAdmissionPolicy(cmd.Context(), args[0]); err != nil {
				return err
			}
			return g.printPolicyResults(cmd, []policyResult{{Agent: args[0], Outcome: outcomeDeleted}})
		},
	}
}
