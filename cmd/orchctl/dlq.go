package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newDLQCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "dlq",
		Short: "List, replay and purge dead letters: jobs whose attempts are used up",
		Long: `List, replay and purge the dead-letter queue (admin token).

A job is dead-lettered when its last attempt failed, or an attempt failed with an error its
handler marked non-retryable. Its row stays dead_letter with its last error, and an entry on
stream:orchestrator:dlq says so. After the cause is fixed, replay sends jobs back to pending
with a fresh attempt budget; purge removes them from the queue for good (the job rows stay
dead_letter until retention deletes them).`,
	}, newDLQListCmd(g), newDLQReplayCmd(g), newDLQPurgeCmd(g))
}

// dlqFlags select dead letters: by type on the server, by agent and error text here.
type dlqFlags struct {
	params        client.ListDeadLettersParams
	all           bool
	agent         string
	errorContains string
}

// match reports whether a dead letter passes the filters applied here (--agent, --error-contains).
func (f *dlqFlags) match(d client.DeadLetter) bool {
	return (f.agent == "" || d.Agent == f.agent) && strings.Contains(d.LastError, f.errorContains)
}

// add adds the selection flags to cmd; forAll prefixes their help ("with --all: ").
func (f *dlqFlags) add(cmd *cobra.Command, forAll string) {
	fl := cmd.Flags()
	fl.StringVar(&f.params.Type, "type", "", forAll+"only dead letters of this job type")
	fl.StringVar(&f.agent, "agent", "", forAll+"only dead letters of this agent")
	fl.StringVar(&f.errorContains, "error-contains", "", forAll+"only dead letters whose last error contains this text")
}

func newDLQListCmd(g *globals) *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "list [--type T] [--agent A] [--error-contains TEXT] [--limit N] [--cursor C | --all]",
		Short: "List dead letters, newest first",
		Long: `List the dead-letter queue (GET /dlq), newest job first, one page at a time: each job's type,
agent, attempts and last error, and its entry on stream:orchestrator:dlq (ENTRY "-" means it is
being published there right now).

What to look for: the LAST ERROR of the newest ones says what broke; many dead letters of one
type with the same error point at a handler or a dependency, not at the jobs.

--type filters on the server; --agent and --error-contains filter the pages here. When more
follow, the cursor of the next page is shown on standard error: pass it with --cursor, or use
--all to follow every page. With -o json the one document is {"dead_letters": [...],
"next_cursor": "..."} (with --all, every dead letter and no next_cursor).`,
		Example: `  orchctl dlq list
  orchctl dlq list --type inference --error-contains "CUDA out of memory" --all -o json | jq -r '.dead_letters[].job_id'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.params.Limit < 0 {
				return usageErrorf(cmd, "--limit must not be negative")
			}
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			page, err := listDeadLetters(cmd, c, &f)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), page)
			}
			if len(page.DeadLetters) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no dead letters")
			} else if err := g.printDeadLetters(cmd, page.DeadLetters); err != nil {
				return err
			}
			if page.NextCursor != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more dead letters follow: add --cursor %s (or use --all)\n", page.NextCursor)
			}
			return nil
		},
	}
	f.add(cmd, "")
	fl := cmd.Flags()
	fl.IntVar(&f.params.Limit, "limit", 0, "page size (default: the server's)")
	fl.StringVar(&f.params.Cursor, "cursor", "", "start at this page (the cursor a previous list showed)")
	fl.BoolVar(&f.all, "all", false, "follow every page")
	cmd.MarkFlagsMutuallyExclusive("cursor", "all")
	return cmd
}

// listDeadLetters reads one page, or every page with f.all, keeping those that match f.
func listDeadLetters(cmd *cobra.Command, c *client.Client, f *dlqFlags) (client.DeadLetterList, error) {
	p := f.params
	page, err := c.ListDeadLetters(cmd.Context(), p)
	if err != nil {
		return client.DeadLetterList{}, err
	}
	seen := map[string]bool{}
	for f.all && page.NextCursor != "" {
		if seen[page.NextCursor] {
			return client.DeadLetterList{}, fmt.Errorf("list dead letters: the server repeated cursor %q", page.NextCursor)
		}
		seen[page.NextCursor] = true
		p.Cursor = page.NextCursor
		next, err := c.ListDeadLetters(cmd.Context(), p)
		if err != nil {
			return client.DeadLetterList{}, err
		}
		page.DeadLetters = append(page.DeadLetters, next.DeadLetters...)
		page.NextCursor = next.NextCursor
	}
	kept := make([]client.DeadLetter, 0, len(page.DeadLetters))
	for _, d := range page.DeadLetters {
		if f.match(d) {
			kept = append(kept, d)
		}
	}
	page.DeadLetters = kept
	return page, nil
}

// printDeadLetters prints dead letters as a table, one row each.
func (g *globals) printDeadLetters(cmd *cobra.Command, dls []client.DeadLetter) error {
	now := g.now()
	t := newTable(cmd.OutOrStdout(), "JOB ID", "TYPE", "AGENT", "ATTEMPTS", "DEAD FOR", "ENTRY", "LAST ERROR")
	for _, d := range dls {
		dead := "-"
		if d.DeadLetteredAt != nil {
			dead = fmtAge(max(now.Sub(*d.DeadLetteredAt), 0))
		}
		t.row(d.JobID, d.Type, d.Agent, fmt.Sprintf("%d/%d", d.Attempts, d.MaxAttempts), dead, orDash(d.StreamID),
			orDash(truncate(d.LastError, maxCellError)))
	}
	return t.flush()
}
