package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// poolStatuses are the states of a pool in lifecycle order.
var poolStatuses = []string{client.PoolStarting, client.PoolRunning, client.PoolDraining, client.PoolStopped,
	client.PoolEvicted}

// poolLive reports whether a pool in this state is meant to have workers (starting, running).
func poolLive(status string) bool {
	return status == client.PoolStarting || status == client.PoolRunning
}

func newPoolsCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "pools",
		Short: "Create, scale, drain and evict worker pools",
		Long: `Create, inspect, scale, drain and evict worker pools.

A pool is a named group of workers serving some job types with one model warm. Its states:

  starting → running      every desired worker registered
  starting|running → draining → stopped
                          drained by an operator or by its hold expiring: the workers stop
                          reading, finish the jobs in flight, release their leases and exit
  starting|running|draining → evicted
                          evicted by an operator: the workers are stopped at once and their
                          jobs rescued (retried on other workers)
  draining|stopped|evicted → starting
                          posted again ("pools create", or "pools scale --restart")

The leader's reconciler makes the workers match the pool (pools.reconcile_interval); "orchctl
control reconcile" runs a pass at once. On Kubernetes, "orchctl pools manifest" prints the
Deployment of a pool's workers and the KEDA ScaledObject that keeps it at the pool's size.`,
	}, newPoolsListCmd(g), newPoolsGetCmd(g), newPoolsCreateCmd(g), newPoolsScaleCmd(g),
		newPoolsDrainCmd(g), newPoolsEvictCmd(g), newPoolsManifestCmd(g))
}

func newPoolsListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every pool with its state and workers",
		Long: `List every pool (GET /workers/pools): its state and why it is in it, and its workers live
out of desired (WORKERS).

What to look for:
  - starting for long, or WORKERS below desired: its workers do not register (the worker logs
    under data_dir/worker-logs for local pools; the deployment for external ones);
  - draining for long: jobs are still in flight; past pools.drain_grace the workers are told
    to stop and local ones are killed;
  - evicted with live workers: they are being stopped (pools.evict_grace).

With -o json the one document is {"pools": [...]}.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListPools(cmd.Context())
			if err != nil {
				return err
			}
			if list.Pools == nil {
				list.Pools = []client.Pool{}
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list.Pools) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no pools")
				return nil
			}
			return g.printPools(cmd, list.Pools)
		},
	}
}

// printPools prints pools as a table, one row each.
func (g *globals) printPools(cmd *cobra.Command, pools []client.Pool) error {
	now := g.now()
	t := newTable(cmd.OutOrStdout(), "POOL", "AGENT", "MODEL", "TYPES", "STATUS", "WORKERS", "HOLD", "SINCE", "REASON")
	for _, p := range pools {
		t.row(p.PoolID, p.AgentName, p.ModelID, strings.Join(p.Types, ","), p.Status, poolWorkers(p),
			fmtHold(p.HoldSeconds), fmtAge(max(now.Sub(p.StatusChangedAt), 0)), orDash(truncate(p.StatusReason, maxCellError)))
	}
	return t.flush()
}

// poolWorkers is the WORKERS cell: live workers out of desired.
func poolWorkers(p client.Pool) string {
	return strconv.Itoa(p.SpawnedWorkers) + "/" + strconv.Itoa(p.DesiredWorkers)
}

// fmtHold shows a pool's hold: "forever" for 0.
func fmtHold(seconds int) string {
	if seconds <= 0 {
		return "forever"
	}
	return (time.Duration(seconds) * time.Second).String()
}

func newPoolsGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get POOL_ID",
		Short: "Show one pool and its registered workers",
		Long: `Show one pool (GET /workers/pools/{id}) and its registered workers: each worker's node, process,
state (idle, executing, draining, offline), the instruction it was given (drain, stop), the jobs
it has in flight and when it last heartbeated.

A worker whose LAST HEARTBEAT is older than a few pools.heartbeat_interval is about to be marked
offline; an offline worker's leases are left to expire, which retries its jobs. With -o json the
one document is the pool with its "workers".`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeFromAPI(g, 1, poolIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			p, err := c.GetPool(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if p.Workers == nil {
				p.Workers = []client.Worker{}
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			return g.printPool(cmd, p)
		},
	}
}

// printPool prints a pool's fields, then its workers.
func (g *globals) printPool(cmd *cobra.Command, p client.Pool) error {
	out, now := cmd.OutOrStdout(), g.now()
	meta := "-"
	if len(p.Metadata) > 0 {
		meta = fmtRaw(p.Metadata, maxFieldValue)
	}
	t := newTable(out)
	for _, kv := range [][2]string{
		{"POOL", p.PoolID},
		{"AGENT", p.AgentName},
		{"MODEL", p.ModelID},
		{"ADAPTER", orDash(p.Adapter)},
		{"VARIANT", orDash(p.Variant)},
		{"TYPES", strings.Join(p.Types, ", ")},
		{"STATUS", p.Status},
		{"REASON", orDash(p.StatusReason)},
		{"STATUS SINCE", fmtTime(p.StatusChangedAt, now)},
		{"WORKERS", poolWorkers(p) + " (live/desired)"},
		{"HOLD", fmtHold(p.HoldSeconds)},
		{"CREATED", fmtTime(p.CreatedAt, now)},
		{"STARTED", fmtTime(p.StartedAt, now)},
		{"LAST HEARTBEAT", fmtTimePtr(p.LastHeartbeat, now)},
		{"LAST ACTIVITY", fmtTimePtr(p.LastActivityAt, now)},
		{"METADATA", meta},
	} {
		t.row(kv[0], kv[1])
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if len(p.Workers) == 0 {
		fmt.Fprintln(out, "no registered workers")
		return nil
	}
	t = newTable(out, "WORKER", "NODE", "HOST", "PID", "STATUS", "INSTRUCTION", "IN FLIGHT", "CLAIMED", "LAST HEARTBEAT")
	for _, w := range p.Workers {
		pid := "-"
		if w.PID > 0 {
			pid = strconv.Itoa(w.PID)
		}
		t.row(w.WorkerID, orDash(w.NodeID), orDash(w.Hostname), pid, w.Status, orDash(w.Instruction),
			strconv.Itoa(w.InFlight)+"/"+strconv.Itoa(w.Concurrency), strconv.FormatInt(w.JobsClaimed, 10),
			fmtRelative(w.LastHeartbeat, now))
	}
	return t.flush()
}

// createFlags are the flags of `pools create`.
type createFlags struct {
	req      client.PoolRequest
	hold     time.Duration
	metadata string
}

func newPoolsCreateCmd(g *globals) *cobra.Command {
	var f createFlags
	cmd := &cobra.Command{
		Use:   "create POOL_ID --agent A --model M --types T1,T2 [--workers N] [--hold D] [flags]",
		Short: "Create a pool, or update or restart one",
		Long: `Create a pool (POST /workers/pool): the leader starts --workers workers serving --types (local
provisioner) or reports them missing until the deployment starts them (external provisioner).

Posting a pool that exists is idempotent with the same spec; another spec (more workers, other
types) updates it, and a draining, stopped or evicted pool starts again. RESULT says which:
created, updated, restarted or unchanged. --hold drains the pool after that long without a
claimed job or an agent heartbeat (0, the default: never).

With -o json the one document is the API's answer {"pool", "created", "updated", "preload_id"}.`,
		Example: `  orchctl pools create mistral --agent chat --model mistral-7b --types inference --workers 2
  orchctl pools create embed --agent etl --model bge-m3 --types ingest --hold 15m --metadata '{"team": "search"}'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := f.req
			req.PoolID = args[0]
			if f.hold < 0 || f.hold%time.Second != 0 {
				return usageErrorf(cmd, "--hold must be a whole number of seconds, 0 or more")
			}
			req.HoldSeconds = int(f.hold / time.Second)
			if f.metadata != "" {
				if !json.Valid([]byte(f.metadata)) {
					return usageErrorf(cmd, "--metadata is not valid JSON")
				}
				req.Metadata = json.RawMessage(f.metadata)
			}
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			before := ""
			if p, err := c.GetPool(cmd.Context(), req.PoolID); err == nil {
				before = p.Status
			} else if !client.IsStatus(err, http.StatusNotFound) {
				return err
			}
			return g.postPool(cmd, c, req, before)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.req.AgentName, "agent", "", "the agent the pool serves")
	fl.StringVar(&f.req.ModelID, "model", "", "the model the workers keep warm")
	fl.StringSliceVar(&f.req.Types, "types", nil, "job types the workers serve (comma-separated)")
	fl.IntVar(&f.req.DesiredWorkers, "workers", 1, "desired number of workers")
	fl.StringVar(&f.req.Adapter, "adapter", "", "the serving adapter (vllm, tgi, ...)")
	fl.StringVar(&f.req.Variant, "variant", "", "the model variant (quantisation, revision)")
	fl.DurationVar(&f.hold, "hold", 0, "drain after this long idle (0: never)")
	fl.StringVar(&f.metadata, "metadata", "", "a JSON object kept with the pool")
	for _, name := range []string{"agent", "model", "types"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func newPoolsScaleCmd(g *globals) *cobra.Command {
	var restart bool
	cmd := &cobra.Command{
		Use:   "scale POOL_ID WORKERS [--restart]",
		Short: "Change a pool's desired number of workers",
		Long: `Change a pool's desired number of workers, keeping the rest of its spec (it posts the pool again).
Scaling down drains the idle workers first, then the least busy; their jobs in flight finish.
0 keeps the pool with no worker.

Posting a draining, stopped or evicted pool starts it again, so scale refuses such a pool unless
--restart says that is meant: after a maintenance drain, "orchctl pools scale POOL N --restart"
brings it back with N workers. Exit codes and output as "pools create".`,
		Example: `  orchctl pools scale mistral 4
  orchctl pools scale mistral 2 --restart`,
		Args:              usageArgs(cobra.ExactArgs(2)),
		ValidArgsFunction: completeFromAPI(g, 1, poolIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 0 {
				return usageErrorf(cmd, "WORKERS %q: want a whole number, 0 or more", args[1])
			}
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			p, err := c.GetPool(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !poolLive(p.Status) && !restart {
				return usageErrorf(cmd, "pool %s is %s: scaling it would start it again; add --restart if that is meant",
					p.PoolID, p.Status)
			}
			req := client.PoolRequest{PoolID: p.PoolID, AgentName: p.AgentName, ModelID: p.ModelID, Adapter: p.Adapter,
				Variant: p.Variant, Types: p.Types, DesiredWorkers: n, HoldSeconds: p.HoldSeconds, Metadata: p.Metadata}
			return g.postPool(cmd, c, req, p.Status)
		},
	}
	cmd.Flags().BoolVar(&restart, "restart", false, "start the pool again when it is draining, stopped or evicted")
	return cmd
}

// postPool posts a pool and prints the answer; before is the pool's state before the call
// ("" for a new pool), so that a restart can be told from an update.
func (g *globals) postPool(cmd *cobra.Command, c *client.Client, req client.PoolRequest, before string) error {
	res, err := c.CreatePool(cmd.Context(), req)
	if err != nil {
		return err
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	result := "unchanged"
	switch {
	case res.Created:
		result = "created"
	case res.Updated && res.Pool.Status == client.PoolStarting && before != "" && !poolLive(before):
		result = "restarted"
	case res.Updated:
		result = "updated"
	}
	t := newTable(cmd.OutOrStdout(), "POOL", "STATUS", "WORKERS", "RESULT")
	t.row(res.Pool.PoolID, res.Pool.Status, poolWorkers(res.Pool), result)
	return t.flush()
}
