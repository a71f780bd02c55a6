package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/nodelabels"
)

// maxCellLabels bounds the LABELS cell of `nodes list` ("nodes show" has them all).
const maxCellLabels = 60

func newNodesCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "nodes",
		Short: "List nodes with their labels and status; cordon and uncordon them",
		Long: `List the nodes of the cluster and cordon or uncordon them.

A node is recorded when one of its workers registers or it reports GPU telemetry. Its labels
are those of its workers' configuration (node_labels) and those the orchestrator derives from
its telemetry (gpu.product, gpu.memory_mb, gpu.count, gpu.driver, gpu.cuda, gpu.mig). Its
status:

  ready      it may take new work
  cordoned   an admin cordoned it: the scheduler places no new job there; jobs placed there
             before are still claimed, and running ones run to their end
  offline    no live worker is registered on it and its GPU telemetry is older than
             leases.telemetry_freshness`,
	}, newNodesListCmd(g), newNodesShowCmd(g), newNodesCordonCmd(g, true), newNodesCordonCmd(g, false))
}

func newNodesListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every node: status, GPUs, free memory, workers, leases, labels",
		Long: `List every node (GET /nodes): its status, how many GPUs it reports, the memory placement could
still hand out out of the total (FREE/TOTAL, summed over its GPUs), its live workers, its active
leases, its labels and when it was last recorded.

With -o json the one document is {"nodes": [...]}.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			nodes, err := g.nodes(cmd.Context(), cmd)
			switch {
			case err != nil:
				return err
			case g.json():
				return writeJSON(cmd.OutOrStdout(), client.NodeList{Nodes: nodes})
			case len(nodes) == 0:
				fmt.Fprintln(cmd.ErrOrStderr(), "no nodes: no worker registered and no node reported GPU telemetry yet")
				return nil
			}
			return g.printNodes(cmd, nodes)
		},
	}
}

// nodes reads every node (never nil).
func (g *globals) nodes(ctx context.Context, cmd *cobra.Command) ([]client.Node, error) {
	c, err := g.client(cmd)
	if err != nil {
		return nil, err
	}
	list, err := c.ListNodes(ctx)
	if list.Nodes == nil {
		list.Nodes = []client.Node{}
	}
	return list.Nodes, err
}

// printNodes prints one row per node.
func (g *globals) printNodes(cmd *cobra.Command, nodes []client.Node) error {
	now := g.now()
	t := newTable(cmd.OutOrStdout(), "NODE", "STATUS", "GPUS", "FREE/TOTAL", "WORKERS", "LEASES", "LABELS", "LAST SEEN")
	for _, n := range nodes {
		var free, total int64
		for _, gpu := range n.GPUs {
			free, total = free+gpu.MemoryFreeMB, total+gpu.MemoryTotalMB
		}
		memory := "-"
		if len(n.GPUs) > 0 {
			memory = fmtMB(free) + "/" + fmtMB(total)
		}
		lastSeen := "-"
		if n.LastSeen != nil {
			lastSeen = fmtRelative(*n.LastSeen, now)
		}
		t.row(n.ID, n.Status, strconv.Itoa(len(n.GPUs)), memory, strconv.Itoa(liveWorkers(n)),
			strconv.Itoa(n.ActiveLeases), orDash(truncate(nodelabels.String(n.Labels), maxCellLabels)), lastSeen)
	}
	return t.flush()
}

// liveWorkers counts the node's workers that are not offline.
func liveWorkers(n client.Node) int {
	live := 0
	for _, w := range n.Workers {
		if w.Status != "offline" {
			live++
		}
	}
	return live
}

func newNodesShowCmd(g *globals) *cobra.Command {
	return objectCmd(g, "show NODE", "Show one node: labels, cordon, GPUs, workers and active leases",
		`Show one node (GET /nodes/{id}): its status and labels, who cordoned it and why, its GPUs (as
"orchctl gpus" shows them), its registered workers and its active leases. With -o json the one
document is the node.`, nodeIDs, onID(g, (*client.Client).GetNode, g.printNode))
}

// printNode prints a node's fields, then its GPUs, workers and leases.
func (g *globals) printNode(cmd *cobra.Command, n client.Node) error {
	out, now := cmd.OutOrStdout(), g.now()
	t := newTable(out)
	for _, kv := range [][2]string{
		{"NODE", n.ID},
		{"STATUS", n.Status},
		{"LABELS", orDash(nodelabels.String(n.Labels))},
		{"CORDONED AT", fmtTimePtr(n.CordonedAt, now)},
		{"CORDON REASON", orDash(n.CordonReason)},
		{"CORDONED BY", orDash(n.CordonedBy)},
		{"FIRST SEEN", fmtTimePtr(n.FirstSeen, now)},
		{"LAST SEEN", fmtTimePtr(n.LastSeen, now)},
	} {
		t.row(kv[0], kv[1])
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if len(n.GPUs) == 0 {
		fmt.Fprintln(out, "no GPUs reported")
	} else {
		leases := make([]client.Lease, 0, len(n.Leases))
		for _, l := range n.Leases {
			leases = append(leases, client.Lease{NodeID: n.ID, Agent: l.Agent, JobID: l.JobID, GPUIndexes: l.GPUIndexes})
		}
		if err := printGPUs(cmd, n.GPUs, holders(leases, false)); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	if len(n.Workers) == 0 {
		fmt.Fprintln(out, "no registered workers")
	} else {
		t = newTable(out, "WORKER", "POOL", "STATUS", "TYPES")
		for _, w := range n.Workers {
			t.row(w.WorkerID, orDash(w.PoolID), w.Status, strings.Join(w.Types, ","))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	if len(n.Leases) == 0 {
		fmt.Fprintln(out, "no active leases")
		return nil
	}
	t = newTable(out, "LEASE", "AGENT", "JOB", "MODE", "MEMORY", "GPUS")
	for _, l := range n.Leases {
		t.row(orDash(l.LeaseToken), l.Agent, orDash(l.JobID), l.Mode, fmtMB(l.MemoryMB), orDash(fmtInts(l.GPUIndexes)))
	}
	return t.flush()
}

// fmtInts is "0,3".
func fmtInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

func newNodesCordonCmd(g *globals, cordon bool) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cordon NODE [--reason TEXT]",
		Short: "Cordon a node: the scheduler places no new job there; running work goes on",
		Long: `Cordon a node (POST /nodes/{id}/cordon, admin): the scheduler leaves it out of every later
placement. Jobs placed there before are still claimed there, and running jobs run to their end;
a GPU job whose only candidate nodes are cordoned waits with the reason "cordoned: …" ("orchctl
jobs why"). Audited node.cordoned with the admin and the reason. Undo with "orchctl nodes
uncordon". With -o json the one document is the node.`,
		Example: `  orchctl nodes cordon gpu-node-3 --reason "swap a fan"`,
		Args:    usageArgs(cobra.ExactArgs(1)),
	}
	act := (*client.Client).CordonNode
	if !cordon {
		cmd.Use, cmd.Short = "uncordon NODE [--reason TEXT]", "Uncordon a node: the scheduler places on it again"
		cmd.Long = `Uncordon a node (POST /nodes/{id}/uncordon, admin): the scheduler places on it again from its
next pass; jobs that waited "cordoned: …" for it are placed. Audited node.uncordoned. With -o
json the one document is the node.`
		cmd.Example = `  orchctl nodes uncordon gpu-node-3`
		act = (*client.Client).UncordonNode
	}
	cmd.ValidArgsFunction = completeFromAPI(g, 1, nodeIDs)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client(cmd)
		if err != nil {
			return err
		}
		n, err := act(c, cmd.Context(), args[0], reason)
		if err != nil {
			return err
		}
		if g.json() {
			return writeJSON(cmd.OutOrStdout(), n)
		}
		return g.printNodes(cmd, []client.Node{n})
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (audited and shown with the node; at most 512 bytes)")
	return cmd
}

// nodeIDs lists the nodes' ids for completion.
func nodeIDs(ctx context.Context, g *globals, cmd *cobra.Command) ([]string, error) {
	nodes, err := g.nodes(ctx, cmd)
	return idsOf(nodes, func(n client.Node) string { return n.ID }), err
}
