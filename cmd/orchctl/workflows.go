package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newWorkflowsCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "workflows",
		Short: "Create, show, list and cancel workflows of steps that wait for each other",
		Long: `Create, show, list and cancel workflows.

A workflow is named steps, each a job template with the steps it needs (or phases of steps with a
barrier between them). Each step runs as one job, "<workflow id>.<step>": it waits (status
waiting) until every step it needs has ended done, and a step that ends dead_letter or cancelled
cancels the steps that need it (unless on_parent_failure is run). The workflow is running until
every step's job has ended, then done (all done) or failed; a cancel cancels the steps not
ended. A step's handler gets its parents' results (exec: ORCH_PARENTS).`,
	}, newWorkflowsCreateCmd(g), newWorkflowsGetCmd(g), newWorkflowsListCmd(g), newWorkflowsCancelCmd(g))
}

func newWorkflowsCreateCmd(g *globals) *cobra.Command {
	var file, id, agent string
	cmd := &cobra.Command{
		Use:   "create --file FILE|- [--workflow-id ID] [--agent A]",
		Short: "Create a workflow from a JSON file (POST /workflows)",
		Long: `Create a workflow from a JSON document (what POST /workflows takes: {"steps": [...]} or
{"phases": [[...], [...]]}, each step {"name", "type", "payload", "needs", ...}), read from FILE or
from standard input with --file -. --workflow-id and --agent override the document's. A
workflow id that exists answers that workflow ("exists") when the document repeats its first
request. Prints the workflow id, its status and each step's job id; with -o json the answer.

Exit codes: 0 created or exists, 1 usage or an unreadable file, 2 the API refused it (a 400
names the field).`,
		Example: `  orchctl workflows create --file diamond.json
  echo '{"steps":[{"name":"a","type":"noop","payload":{}},{"name":"b","type":"noop","payload":{},"needs":["a"]}]}' | orchctl workflows create --file - --agent ops`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var raw []byte
			var err error
			if file == "-" {
				raw, err = io.ReadAll(g.stdin)
			} else {
				raw, err = os.ReadFile(file)
			}
			if err != nil {
				return usageErrorf(cmd, "--file: %w", err)
			}
			var req client.WorkflowRequest
			dec := json.NewDecoder(strings.NewReader(string(raw)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return usageErrorf(cmd, "--file %s: not a workflow: %w", file, err)
			}
			if id != "" {
				req.WorkflowID = id
			}
			if agent != "" {
				req.Agent = agent
			}
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			resp, err := c.SubmitWorkflow(cmd.Context(), req)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			verb := "exists"
			if resp.Created {
				verb = "created"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "workflow %s %s (%s)\n", resp.WorkflowID, verb, resp.Status)
			t := newTable(cmd.OutOrStdout(), "STEP", "JOB ID")
			for _, s := range resp.Steps {
				t.row(s.Name, s.JobID)
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "the workflow document (JSON), - for standard input")
	cmd.Flags().StringVar(&id, "workflow-id", "", "stable workflow id (at most 64 of A-Z a-z 0-9 . _ : -)")
	cmd.Flags().StringVar(&agent, "agent", "", "agent the workflow is submitted for")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func newWorkflowsGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get WORKFLOW_ID",
		Short: "Show a workflow: its status and each step with what it needs and its job's status",
		Long: `Show a workflow (GET /workflows/{id}): its status (running, done, failed, cancelled), when it
was created and finished, and one row per step with its phase, the steps it needs, its job and
that job's status ("orchctl jobs get" shows a step's job in full, with its result). With -o json
the one document is the workflow, the request as accepted included.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: byID(g, (*client.Client).GetWorkflow, g.printWorkflow),
	}
}

// byID is the RunE of a command that acts on one object named by its argument: it prints what
// act answers with show, or as JSON with -o json.
func byID[T any](g *globals, act func(*client.Client, context.Context, string) (T, error),
	show func(*cobra.Command, T) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := g.client(cmd)
		if err != nil {
			return err
		}
		v, err := act(c, cmd.Context(), args[0])
		switch {
		case err != nil:
			return err
		case g.json():
			return writeJSON(cmd.OutOrStdout(), v)
		}
		return show(cmd, v)
	}
}

// printWorkflow prints a workflow's fields, then its steps.
func (g *globals) printWorkflow(cmd *cobra.Command, w client.Workflow) error {
	out, now := cmd.OutOrStdout(), g.now()
	t := newTable(out)
	for _, kv := range [][2]string{
		{"WORKFLOW", w.WorkflowID}, {"AGENT", w.Agent}, {"STATUS", w.Status},
		{"CREATED", fmtRelative(w.CreatedAt, now)}, {"FINISHED", fmtTimePtr(w.FinishedAt, now)},
	} {
		t.row(kv[0], kv[1])
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	t = newTable(out, "STEP", "PHASE", "NEEDS", "JOB ID", "JOB STATUS")
	for _, s := range w.Steps {
		t.row(s.Name, strconv.Itoa(s.Phase), orDash(strings.Join(s.Needs, ",")), s.JobID, s.JobStatus)
	}
	return t.flush()
}

func newWorkflowsListCmd(g *globals) *cobra.Command {
	var p client.ListWorkflowsParams
	cmd := &cobra.Command{
		Use:   "list [--status S] [--agent A] [--limit N]",
		Short: "List workflows, newest first",
		Long: `List workflows (GET /workflows), newest first: id, agent, status, when created and finished.
An agent token lists its own agent's. --status is running, done, failed or cancelled. With -o
json the one document is the page ({"workflows": [...], "next_cursor"}).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListWorkflows(cmd.Context(), p)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			now := g.now()
			t := newTable(cmd.OutOrStdout(), "WORKFLOW", "AGENT", "STATUS", "CREATED", "FINISHED")
			for _, w := range list.Workflows {
				t.row(w.WorkflowID, w.Agent, w.Status, fmtRelative(w.CreatedAt, now), fmtTimePtr(w.FinishedAt, now))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&p.Status, "status", "", "running, done, failed or cancelled")
	cmd.Flags().StringVar(&p.Agent, "agent", "", "only this agent's")
	cmd.Flags().IntVar(&p.Limit, "limit", 50, "at most this many (1..500)")
	return cmd
}

func newWorkflowsCancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel WORKFLOW_ID",
		Short: "Cancel a running workflow: its steps not ended are cancelled",
		Long: `Cancel a running workflow (POST /workflows/{id}/cancel): in one transaction every step's job
that has not ended is cancelled (a running handler stops when its worker next calls in) and the
workflow moves to cancelled, audited workflow.cancelled. A workflow that has ended is refused
(conflict). With -o json the one document is the workflow.

Exit codes: 0 cancelled, 2 the API refused it (not found, ended already).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: byID(g, (*client.Client).CancelWorkflow, func(cmd *cobra.Command, w client.Workflow) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "workflow %s %s\n", w.WorkflowID, w.Status)
			return err
		}),
	}
}
