package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/api"
)

func tokenCmd() *cobra.Command {
	tok := &cobra.Command{Use: "token", Short: "Manage API tokens"}
	var role, agent string
	create := &cobra.Command{
		Use:   "create --role agent|worker|admin [--agent NAME]",
		Short: "Create a token: prints it once, and the line (its hash) for the tokens file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, line, err := api.GenerateToken(role, agent)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "token: %s\n", token)
			fmt.Fprintf(out, "tokens file line: %s\n", line)
			fmt.Fprintln(cmd.ErrOrStderr(), "The token is shown only now; the server keeps only its hash. "+
				"Append the line to the tokens file (ORCH_TOKENS_FILE) and restart or reload the orchestrator.")
			return nil
		},
	}
	create.Flags().StringVar(&role, "role", "", "agent, worker or admin")
	create.Flags().StringVar(&agent, "agent", "", "the agent name bound to an agent token")
	_ = create.MarkFlagRequired("role")
	tok.AddCommand(create)
	return tok
}
