package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newPoolsDrainCmd(g *globals) *cobra.Command {
	return g.poolEndCmd(&cobra.Command{
		Use:   "drain POOL_ID [--wait [--wait-timeout 5m]]",
		Short: "Drain a pool: its workers finish their jobs in flight, then exit",
		Long: `Drain a pool (POST /workers/pools/{id}/drain): starting|running → draining. Its workers stop
reading new work, finish the jobs in flight, report them (which releases their leases),
deregister and exit; the pool becomes stopped when none is left. Jobs still queued stay pending
for other pools. Past pools.drain_grace the workers left are told to stop (their jobs are
retried elsewhere) and local ones are killed.

Draining a pool that drains or stopped already changes nothing (CHANGED no); an evicted pool
cannot drain (409, exit code 2). Bring a drained pool back with "orchctl pools scale POOL N
--restart".

With --wait, orchctl then waits until the pool is stopped (progress on stderr). Exit codes: 0
drained (stopped); 2 API error; 5 --wait-timeout passed first. With -o json the one document is
{"pool": {...}, "changed": bool}; with --wait the pool as it is at the end.`,
		Example: `  orchctl pools drain mistral
  orchctl pools drain mistral --wait --wait-timeout 10m`,
	}, drainEnd)
}

func newPoolsEvictCmd(g *globals) *cobra.Command {
	return g.poolEndCmd(&cobra.Command{
		Use:   "evict POOL_ID [--wait [--wait-timeout 5m]]",
		Short: "Force-evict a pool: stop its workers now and retry their jobs elsewhere",
		Long: `Evict a pool (POST /control/evict_pool): starting|running|draining → evicted, at once. Its
workers are told to stop and cancel their handlers; local workers get SIGTERM, then SIGKILL after
pools.evict_grace. The leader rescues the jobs they held: each attempt fails with "pool evicted"
and the job is retried on another pool (or dead-lettered when its attempts are used up); their
leases end, which frees the GPU memory for placement.

Use it when a pool must go now (a GPU out of memory, a bad model); use "pools drain" when its
jobs should finish. Evicting a pool that is evicted or stopped changes nothing (CHANGED no).

With --wait, orchctl then waits until the pool has no live worker left. What to check after:
"orchctl pools get POOL" (no worker but offline ones), "orchctl leases list --status active"
(no lease of the pool's jobs), "orchctl jobs list --status running" (none of its jobs).
Exit codes: 0 evicted (and, with --wait, no live worker); 2 API error; 5 --wait-timeout passed.
With -o json the one document is {"pool": {...}, "changed": bool}.`,
		Example: `  orchctl pools evict mistral --wait`,
	}, evictEnd)
}

// poolEnd is what `pools drain` or `pools evict` does, and the end it waits for.
type poolEnd struct {
	act   func(*client.Client, context.Context, string) (client.PoolChange, error)
	ended func(client.Pool) bool // whether the pool got to the end
	what  string                 // the end, in the wait's progress: "pool ID is <what>"
	until string                 // the end, in the help of --wait: "wait until <until>"
}

// drainEnd and evictEnd are what `pools drain` and `pools evict` do, and the ends they wait for.
var (
	drainEnd = poolEnd{act: (*client.Client).DrainPool, ended: poolDrained, what: "drained (stopped)",
		until: "the pool is stopped"}
	evictEnd = poolEnd{act: (*client.Client).EvictPool, ended: poolEvicted, what: "no live worker is left",
		until: "the pool has no live worker"}
)

// poolEndCmd makes cmd, whose Use, Short, Long and Example are set, `pools drain` or `pools
// evict` as e says: one POOL_ID (completed from the API) and the --wait flags.
func (g *globals) poolEndCmd(cmd *cobra.Command, e poolEnd) *cobra.Command {
	var (
		wait bool
		o    waitOptions
	)
	cmd.Args = usageArgs(cobra.ExactArgs(1))
	cmd.ValidArgsFunction = completeFromAPI(g, 1, poolIDs)
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return g.endPool(cmd, args[0], wait, o, e) }
	addWaitFlags(cmd, &wait, &o, e.until)
	return cmd
}

// endPool runs a drain or an eviction of one pool, then, with wait, waits until e.ended says
// the pool got there, and prints the pool.
func (g *globals) endPool(cmd *cobra.Command, id string, wait bool, o waitOptions, e poolEnd) error {
	if wait {
		if err := o.check(cmd); err != nil {
			return err
		}
	}
	c, err := g.client(cmd)
	if err != nil {
		return err
	}
	change, err := e.act(c, cmd.Context(), id)
	if err != nil {
		return err
	}
	var waitErr error
	if wait {
		waitErr = g.pollState(cmd.Context(), cmd.ErrOrStderr(), o, "pool "+id+" is "+e.what,
			func(ctx context.Context) (bool, string, error) {
				p, err := c.GetPool(ctx, id)
				if err != nil {
					return false, "", err
				}
				change.Pool = p
				return e.ended(p), poolProgress(p), nil
			})
		var timedOut *exitError
		if waitErr != nil && !errors.As(waitErr, &timedOut) {
			return waitErr // an API error or an interruption: nothing to show
		}
	}
	if err := g.printPoolChange(cmd, change); err != nil {
		return err
	}
	return waitErr
}

// poolDrained reports whether a drain is over: the pool stopped (or was evicted meanwhile and
// has no worker left).
func poolDrained(p client.Pool) bool {
	return p.Status == client.PoolStopped || poolEvicted(p)
}

// poolEvicted reports whether an eviction is over: the pool is evicted and none of its workers
// is live (registered and not offline, or a process still stopping).
func poolEvicted(p client.Pool) bool {
	if p.Status != client.PoolEvicted || p.SpawnedWorkers > 0 {
		return false
	}
	for _, w := range p.Workers {
		if w.Status != client.WorkerOffline {
			return false
		}
	}
	return true
}

// poolProgress is a pool's progress line: "pool mistral draining: 2 live workers, 3 jobs in flight".
func poolProgress(p client.Pool) string {
	live, inFlight := 0, 0
	for _, w := range p.Workers {
		if w.Status != client.WorkerOffline {
			live++
			inFlight += w.InFlight
		}
	}
	return fmt.Sprintf("pool %s %s: %s, %s in flight", p.PoolID, p.Status, plural(live, "live worker"), plural(inFlight, "job"))
}

// printPoolChange prints a drain or an eviction: the pool's state and whether the call changed it.
func (g *globals) printPoolChange(cmd *cobra.Command, ch client.PoolChange) error {
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), ch)
	}
	p := ch.Pool
	t := newTable(cmd.OutOrStdout(), "POOL", "STATUS", "WORKERS", "CHANGED", "REASON")
	t.row(p.PoolID, p.Status, poolWorkers(p), yesNo(ch.Changed), orDash(truncate(p.StatusReason, maxCellError)))
	return t.flush()
}
