package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/api"
)

func tokenCmd() *cobra.Command {
	tok := &cobra.Command{Use: "token", Short: "Manage API tokens"}
	var (
		role, agent, pool, name string
		types                   []string
	)
	create := &cobra.Command{
		Use:   "create --role agent|worker|admin|approver [--agent NAME] [--types A,B] [--pool ID] [--name WHO]",
		Short: "Create a token: prints it once, and the line (its hash) for the tokens file",
		Long: "Create a token: prints it once, and the line (its hash) for the tokens file.\n\n" +
			"A worker token may be scoped: --types limits the job types it claims and registers for, " +
			"--pool the pool it claims and registers in (its worker must name that pool). " +
			"Without them it claims any type, in any pool, as before. An approver token (--role approver) " +
			"approves and rejects the jobs approval policies hold and must name its person with --name: " +
			"the audit records each decision as approver:<name>, and a two-key policy needs two names.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec := api.TokenRecord{Role: api.Role(role), Agent: agent, Pool: pool, Name: name}
			if cmd.Flags().Changed("types") {
				rec.Types = types
				if rec.Types == nil {
					rec.Types = []string{}
				}
			}
			token, line, err := api.NewToken(rec)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "token: %s\n", token)
			fmt.Fprintf(out, "tokens file line: %s\n", line)
			fmt.Fprintln(cmd.ErrOrStderr(), "The token is shown only now; the server keeps only its hash. "+
				"Append the line to the tokens file (ORCH_TOKENS_FILE) and reload the orchestrator (SIGHUP) or restart it.")
			return nil
		},
	}
	create.Flags().StringVar(&role, "role", "", "agent, worker, admin or approver")
	create.Flags().StringVar(&name, "name", "", "approver tokens: the person the token is (the audit's approver:<name>)")
	create.Flags().StringVar(&agent, "agent", "", "the agent name bound to an agent token")
	create.Flags().StringSliceVar(&types, "types", nil, "worker tokens: the only job types it may claim and register for (comma list)")
	create.Flags().StringVar(&pool, "pool", "", "worker tokens: the only pool it may claim and register in")
	_ = create.MarkFlagRequired("role")
	tok.AddCommand(create)
	return tok
}

// reloadTokensOnHangup rereads the tokens (the tokens file and ORCH_API_TOKENS) on every SIGHUP
// until ctx ends and has srv accept them: a token is added or revoked without a restart.
func reloadTokensOnHangup(ctx context.Context, srv *api.Server, path string, current *api.Tokens, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				current = reloadTokens(srv, path, os.Getenv(api.TokensEnv), current, log)
			}
		}
	}()
}

// reloadTokens loads the tokens again and has srv accept them instead of current; it returns
// the set in use after. A set that does not load (a malformed line, say, which the log names)
// leaves current in use, and so does an empty set in place of a non-empty one: that would
// refuse every request, which a typo should not do (restart to run without tokens).
func reloadTokens(srv *api.Server, path, env string, current *api.Tokens, log *slog.Logger) *api.Tokens {
	next, err := api.LoadTokens(path, env)
	switch {
	case err != nil:
		log.Error("tokens not reloaded: keeping the ones in use", "tokens", current.Len(), "error", err)
		return current
	case next.Len() == 0 && current.Len() > 0:
		log.Error("tokens not reloaded: the tokens file and "+api.TokensEnv+" hold none now, which would "+
			"refuse every request; keeping the ones in use (restart to run without tokens)",
			"tokens", current.Len(), "tokens_file", path)
		return current
	}
	srv.SetTokens(next)
	was, now := current.IDs(), next.IDs()
	log.Info("tokens reloaded", "tokens", next.Len(), "added", notIn(now, was), "removed", notIn(was, now))
	return next
}

// notIn returns the ids of a that are not in b (sorted).
func notIn(a, b []string) []string {
	return slices.DeleteFunc(slices.Clone(a), func(id string) bool {
		_, found := slices.BinarySearch(b, id)
		return found
	})
}
