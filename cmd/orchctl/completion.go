package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// completionTimeout bounds the API call behind a shell completion: a slow or unreachable
// orchestrator must not freeze the operator's shell.
const completionTimeout = 2 * time.Second

// completeFromAPI returns a completion function for a command's first nargs arguments (0: any
// number) that offers the names list returns (pool ids, dead letters' job ids) not given yet,
// read from the API with the global flags and environment as the command itself would use
// them. An API that cannot be reached offers nothing.
func completeFromAPI(g *globals, nargs int, list func(ctx context.Context, g *globals, cmd *cobra.Command) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if nargs > 0 && len(args) >= nargs {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if g.resolve(cmd) != nil { // completions skip the pre-run hooks
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		names, err := list(ctx, g, cmd)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) && !slices.Contains(args, n) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// poolIDs lists the pool ids, for completion.
func poolIDs(ctx context.Context, g *globals, cmd *cobra.Command) ([]string, error) {
	c, err := g.client(cmd)
	if err != nil {
		return nil, err
	}
	list, err := c.ListPools(ctx)
	if err != nil {
		return nil, err
	}
	return idsOf(list.Pools, func(p client.Pool) string { return p.PoolID }), nil
}

// idsOf is the id of each of xs, for completion.
func idsOf[T any](xs []T, id func(T) string) []string {
	ids := make([]string, 0, len(xs))
	for _, x := range xs {
		ids = append(ids, id(x))
	}
	return ids
}

// deadLetterIDs lists the job ids of the newest page of dead letters, for completion.
func deadLetterIDs(ctx context.Context, g *globals, cmd *cobra.Command) ([]string, error) {
	c, err := g.client(cmd)
	if err != nil {
		return nil, err
	}
	page, err := c.ListDeadLetters(ctx, client.ListDeadLettersParams{Limit: 500})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(page.DeadLetters))
	for _, d := range page.DeadLetters {
		ids = append(ids, d.JobID)
	}
	return ids, nil
}

// objectCmd is a command on the one object its argument names, whose id the shell completes
// from the API with ids.
func objectCmd(g *globals, use, short, long string, ids func(ctx context.Context, g *globals, cmd *cobra.Command) ([]string, error),
	run func(*cobra.Command, []string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Long: long, Args: usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeFromAPI(g, 1, ids), RunE: run}
}
