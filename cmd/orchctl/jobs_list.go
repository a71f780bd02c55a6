package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// listFlags are the flags of `jobs list`.
type listFlags struct {
	params client.ListJobsParams
	all    bool
}

func newJobsListCmd(g *globals) *cobra.Command {
	var f listFlags
	cmd := &cobra.Command{
		Use:   "list [--status S] [--type T] [--agent A] [--limit N] [--cursor C | --all]",
		Short: "List jobs, newest first",
		Long: `List jobs, newest first, one page at a time.

--status, --type and --agent filter; --limit is the page size (the server's default is 50, its
maximum 500). When more jobs follow, the cursor of the next page is shown on standard error:
pass it with --cursor, or use --all to follow every page and print them together.

With -o json the output is one document {"jobs": [...], "next_cursor": "..."}; with --all it
holds every job and no next_cursor. An agent token lists only its own agent's jobs.`,
		Example: `  orchctl jobs list --status dead_letter
  orchctl jobs list --agent chat --type inference --limit 20
  orchctl jobs list --status pending --all -o json | jq -r '.jobs[].job_id'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runWithFlags(g.list, &f),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.params.Status, "status", "", "only jobs in this state ("+strings.Join(jobStatuses, ", ")+")")
	fl.StringVar(&f.params.Type, "type", "", "only jobs of this type")
	fl.StringVar(&f.params.Agent, "agent", "", "only jobs of this agent")
	fl.IntVar(&f.params.Limit, "limit", 0, "page size (default: the server's)")
	fl.StringVar(&f.params.Cursor, "cursor", "", "start at this page (the cursor a previous list showed)")
	fl.BoolVar(&f.all, "all", false, "follow every page")
	_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(jobStatuses, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// list runs `jobs list`.
func (g *globals) list(cmd *cobra.Command, f *listFlags) error {
	if f.params.Limit < 0 {
		return usageErrorf(cmd, "--limit must not be negative")
	}
	c, err := g.client(cmd)
	if err != nil {
		return err
	}
	p := f.params
	page, err := c.ListJobs(cmd.Context(), p)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for f.all && page.NextCursor != "" {
		// A server that hands out the same cursor twice would loop forever: refuse.
		if seen[page.NextCursor] {
			return fmt.Errorf("list jobs: the server repeated cursor %q", page.NextCursor)
		}
		seen[page.NextCursor] = true
		p.Cursor = page.NextCursor
		next, err := c.ListJobs(cmd.Context(), p)
		if err != nil {
			return err
		}
		page.Jobs = append(page.Jobs, next.Jobs...)
		page.NextCursor = next.NextCursor
	}
	if page.Jobs == nil {
		page.Jobs = []client.Job{}
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), page)
	}
	if len(page.Jobs) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "no jobs")
		return nil
	}
	if err := g.printJobList(cmd, page.Jobs); err != nil {
		return err
	}
	if page.NextCursor != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "more jobs follow: add --cursor %s (or use --all)\n", page.NextCursor)
	}
	return nil
}

// printJobList prints jobs as a table, one row each.
func (g *globals) printJobList(cmd *cobra.Command, jobs []client.Job) error {
	now := g.now()
	t := newTable(cmd.OutOrStdout(), "JOB ID", "TYPE", "AGENT", "STATUS", "ATTEMPTS", "WORKER", "AGE", "LAST ERROR")
	for _, j := range jobs {
		age := "-"
		if !j.CreatedAt.IsZero() {
			age = fmtAge(max(now.Sub(j.CreatedAt), 0))
		}
		t.row(j.JobID, j.Type, j.Agent, j.Status, attempts(j), orDash(j.WorkerID), age,
			orDash(truncate(j.LastError, maxCellError)))
	}
	return t.flush()
}
