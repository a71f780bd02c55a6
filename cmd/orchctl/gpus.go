package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newGPUsCmd(g *globals) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:   "gpus [--node N]",
		Short: "Show every GPU: memory used, reserved by leases and free for placement, telemetry age",
		Long: `Show every GPU the orchestrator knows (GET /gpus): the latest telemetry its node reported,
what active leases reserve on it, and what placement would still hand out:

  FREE = TOTAL − max(USED, RESERVED) − safety margin

USED is what the driver reports (every process on the GPU, ours or not); RESERVED is what leases
promised, including holders that have not allocated yet, and HELD BY says whose: the jobs of
worker leases and "agent:NAME" for an agent's own lease (a job of several GPUs is on each). STATE is "ok", "stale" (the telemetry
is older than leases.telemetry_freshness: placement skips the GPU until its node reports
again) or "lost: REASON" (the driver lost the GPU; it needs a reset and is never placed on).

What to look for in a GPU out-of-memory emergency:
  - USED far above RESERVED: memory used outside any lease (a runaway process, a leak);
  - RESERVED near TOTAL with few LEASES: large reservations ("orchctl leases list --node N");
  - a node whose GPUs all turned stale: its workers stopped reporting (down, partitioned).

The cluster-wide pressure that closes the GPU admission gate is in "orchctl admission get".
With -o json the one document is {"gpus": [...]}, with exact numbers (MiB, seconds).`,
		Example: `  orchctl gpus
  orchctl gpus --node gpu-node-3 -o json | jq '.gpus[] | {gpu_index, memory_free_mb}'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListGPUs(cmd.Context(), node)
			if err != nil {
				return err
			}
			if list.GPUs == nil {
				list.GPUs = []client.GPU{}
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list.GPUs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no GPUs: no node has reported GPU telemetry (workers send it with their lease renewals)")
				return nil
			}
			active, err := c.ListLeases(cmd.Context(), client.ListLeasesParams{Status: client.LeaseActive, NodeID: node,
				Limit: leaseListLimitMax})
			if err != nil {
				return err
			}
			return printGPUs(cmd, list.GPUs, holders(active.Leases, len(active.Leases) == leaseListLimitMax))
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only the GPUs of this node")
	return cmd
}

// gpuKey names one GPU of one node.
type gpuKey struct {
	node  string
	index int
}

// maxHolders bounds the holders a HELD BY cell names.
const maxHolders = 3

// holders is the HELD BY cell of every GPU the active leases hold: their jobs, or the agents
// of agents' own leases, oldest first, at most maxHolders then "+N". truncated says the list of
// leases was cut at its page size, so a cell may miss some.
func holders(active []client.Lease, truncated bool) map[gpuKey]string {
	names := map[gpuKey][]string{}
	for i := len(active) - 1; i >= 0; i-- { // the API lists newest first
		l := active[i]
		who := l.JobID
		if who == "" {
			who = "agent:" + l.Agent
		}
		for _, g := range l.GPUIndexes {
			k := gpuKey{l.NodeID, g}
			names[k] = append(names[k], who)
		}
	}
	out := make(map[gpuKey]string, len(names))
	for k, ns := range names {
		cell := strings.Join(ns[:min(len(ns), maxHolders)], ", ")
		if more := len(ns) - maxHolders; more > 0 {
			cell += fmt.Sprintf(" +%d", more)
		}
		if truncated {
			cell += " …"
		}
		out[k] = cell
	}
	return out
}

// printGPUs prints one row per GPU; heldBy is each GPU's HELD BY cell.
func printGPUs(cmd *cobra.Command, gpus []client.GPU, heldBy map[gpuKey]string) error {
	t := newTable(cmd.OutOrStdout(), "NODE", "GPU", "NAME", "TOTAL", "USED", "RESERVED", "FREE", "LEASES",
		"UTIL", "TEMP", "AGE", "STATE", "HELD BY")
	for _, gpu := range gpus {
		leases := strconv.Itoa(gpu.ActiveLeases)
		if gpu.Exclusive {
			leases += "(excl)"
		}
		t.row(gpu.NodeID, strconv.Itoa(gpu.Index), orDash(gpu.Name), fmtMB(gpu.MemoryTotalMB), fmtMB(gpu.MemoryUsedMB),
			fmtMB(gpu.MemoryReservedMB), fmtMB(gpu.MemoryFreeMB), leases, strconv.Itoa(gpu.UtilizationPct)+"%",
			strconv.Itoa(gpu.TemperatureC)+"C", fmtAge(secondsDuration(gpu.AgeSeconds)), gpuState(gpu),
			orDash(heldBy[gpuKey{gpu.NodeID, gpu.Index}]))
	}
	return t.flush()
}

// gpuState is the STATE cell: whether placement may use the GPU, and why not.
func gpuState(gpu client.GPU) string {
	switch {
	case gpu.Lost:
		return "lost: " + orDash(gpu.LostReason)
	case !gpu.Fresh:
		return "stale"
	}
	return "ok"
}
