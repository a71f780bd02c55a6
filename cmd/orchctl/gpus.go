package main

import (
	"fmt"
	"strconv"

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
promised, including holders that have not allocated yet. STATE is "ok", "stale" (the telemetry
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
			return printGPUs(cmd, list.GPUs)
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only the GPUs of this node")
	return cmd
}

// printGPUs prints one row per GPU.
func printGPUs(cmd *cobra.Command, gpus []client.GPU) error {
	t := newTable(cmd.OutOrStdout(), "NODE", "GPU", "NAME", "TOTAL", "USED", "RESERVED", "FREE", "LEASES",
		"UTIL", "TEMP", "AGE", "STATE")
	for _, gpu := range gpus {
		leases := strconv.Itoa(gpu.ActiveLeases)
		if gpu.Exclusive {
			leases += "(excl)"
		}
		t.row(gpu.NodeID, strconv.Itoa(gpu.Index), orDash(gpu.Name), fmtMB(gpu.MemoryTotalMB), fmtMB(gpu.MemoryUsedMB),
			fmtMB(gpu.MemoryReservedMB), fmtMB(gpu.MemoryFreeMB), leases, strconv.Itoa(gpu.UtilizationPct)+"%",
			strconv.Itoa(gpu.TemperatureC)+"C", fmtAge(secondsDuration(gpu.AgeSeconds)), gpuState(gpu))
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
