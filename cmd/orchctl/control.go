package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newControlCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "control",
		Short: "Cluster-wide operations: reconcile the pools now, drain every pool",
		Long: `Cluster-wide operations on the worker pools.

"control reconcile" asks the leader for a reconciliation pass now; "control drain" drains every
pool at once, for maintenance. Evict a single pool with "orchctl pools evict".`,
	}, newControlReconcileCmd(g), newControlDrainCmd(g))
}

func newControlReconcileCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "reconcile",
		Short: "Run a pool reconciliation pass now",
		Long: `Ask for a pool reconciliation pass now (POST /control/reconcile) instead of at the next
pools.reconcile_interval: the leader marks silent workers offline, starts or stops workers to
match each pool, ends drains whose workers left, and rescues the jobs of evicted pools.

The pass runs on the leader only. When the instance that answered does not lead (TRIGGERED no),
nothing runs now: the leader reconciles on its own schedule; point --api-url at the leader
("orchctl status" names it) to trigger it. The exit code is 0 either way (2 on an API error).
With -o json the one document is {"triggered": bool}.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			res, err := c.Reconcile(cmd.Context())
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			t := newTable(cmd.OutOrStdout(), "TRIGGERED")
			t.row(yesNo(res.Triggered))
			if err := t.flush(); err != nil {
				return err
			}
			if !res.Triggered {
				fmt.Fprintln(cmd.ErrOrStderr(), "this instance does not lead: the leader reconciles at its own pace (orchctl status names it)")
			}
			return nil
		},
	}
}

// drainAllDoc is the -o json document of `control drain`.
type drainAllDoc struct {
	// Drained are the pools the call drained.
	Drained []client.Pool `json:"drained"`
	// Pools are every pool at the end of the wait (--wait only).
	Pools []client.Pool `json:"pools,omitempty"`
}

func newControlDrainCmd(g *globals) *cobra.Command {
	var (
		wait bool
		o    waitOptions
	)
	cmd := &cobra.Command{
		Use:   "drain [--wait [--wait-timeout 5m]]",
		Short: "Drain every pool for maintenance: workers finish their jobs in flight and exit",
		Long: `Drain every starting or running pool (POST /control/drain), as "orchctl pools drain" does for
one: the workers stop reading, finish their jobs in flight, release their leases and exit; each
pool becomes stopped when its last worker left. Queued jobs stay pending (nothing is lost) and
run once pools are started again ("orchctl pools scale POOL N --restart").

Workers that belong to no pool (started with no ORCH_POOL_ID) are not reached: stop them with
SIGTERM (systemctl stop, or scale their deployment to 0), which drains them the same way.
Submits are still accepted meanwhile; throttle them with "orchctl admission set" if needed.

With --wait, orchctl then waits until no pool is starting, running or draining, and no evicted
pool has a worker left. What to check after: "orchctl jobs list --status running" is empty and
"orchctl leases list --status active" shows no job's lease. Exit codes: 0 drained; 2 API error;
5 --wait-timeout passed first. With -o json the one document is {"drained": [...]} and, with
--wait, "pools": every pool at the end.`,
		Example: `  orchctl control drain --wait --wait-timeout 10m`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait {
				if err := o.check(cmd); err != nil {
					return err
				}
			}
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			res, err := c.DrainAll(cmd.Context())
			if err != nil {
				return err
			}
			doc := drainAllDoc{Drained: res.Drained}
			if doc.Drained == nil {
				doc.Drained = []client.Pool{}
			}
			var waitErr error
			if wait {
				waitErr = g.pollState(cmd.Context(), cmd.ErrOrStderr(), o, "every pool is drained",
					func(ctx context.Context) (bool, string, error) {
						list, err := c.ListPools(ctx)
						if err != nil {
							return false, "", err
						}
						doc.Pools = list.Pools
						return clusterDrained(list.Pools), drainProgress(list.Pools), nil
					})
				var timedOut *exitError
				if waitErr != nil && !errors.As(waitErr, &timedOut) {
					return waitErr
				}
			}
			if err := g.printDrainAll(cmd, doc, wait); err != nil {
				return err
			}
			return waitErr
		},
	}
	addWaitFlags(cmd, &wait, &o, "every pool is drained")
	return cmd
}

// clusterDrained reports whether no pool has (or is meant to have) workers: every pool is
// stopped, or evicted without a worker left.
func clusterDrained(pools []client.Pool) bool {
	for _, p := range pools {
		stopped := p.Status == client.PoolStopped
		evictedEmpty := p.Status == client.PoolEvicted && p.SpawnedWorkers == 0
		if !stopped && !evictedEmpty {
			return false
		}
	}
	return true
}

// drainProgress counts pools by state: "3 pools: 2 stopped, 1 draining (2 workers)".
func drainProgress(pools []client.Pool) string {
	counts := map[string]int{}
	workers := 0
	for _, p := range pools {
		counts[p.Status]++
		if p.Status != client.PoolStopped {
			workers += p.SpawnedWorkers
		}
	}
	var parts []string
	for _, st := range poolStatuses {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return fmt.Sprintf("%s: %s; %s left", plural(len(pools), "pool"), strings.Join(parts, ", "), plural(workers, "worker"))
}

// printDrainAll prints what `control drain` drained and, after a wait, every pool.
func (g *globals) printDrainAll(cmd *cobra.Command, doc drainAllDoc, waited bool) error {
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), doc)
	}
	if !waited {
		if len(doc.Drained) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no pool was starting or running: nothing to drain")
			return nil
		}
		return g.printPools(cmd, doc.Drained)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "drained %s\n", plural(len(doc.Drained), "pool"))
	if len(doc.Pools) == 0 {
		return nil
	}
	return g.printPools(cmd, doc.Pools)
}
