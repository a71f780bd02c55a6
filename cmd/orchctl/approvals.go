package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newApprovalsCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "approvals",
		Short: "List the jobs held for approval; approve or reject them; show the policies",
		Long: `List the jobs held for approval and approve or reject them (an approver or an admin token).

An approval policy (approvals.policies in the configuration, or PUT /approvals/policies) holds the
submits it matches (by type, agent, or GPUs and GPU memory above a threshold) in
awaiting_approval: nothing runs them until approved. A two-key policy needs two distinct
approvers. A request nobody decides within its TTL is rejected (the job cancelled) or
escalated (only an admin decides it then), as its policy says. Every decision is audited with
who and why, and shows on the event feeds (job.approved, job.rejected, job.approval_expired,
job.approval_escalated).`,
	}, newApprovalsListCmd(g), newApprovalsDecideCmd(g, true), newApprovalsDecideCmd(g, false), newApprovalsPoliciesCmd(g))
}

func newApprovalsListCmd(g *globals) *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:   "list [--agent A]",
		Short: "List the jobs held for approval, oldest first",
		Long: `List the jobs held for approval (GET /approvals), oldest first: the job, its type and agent,
the policy that holds it, the approvals it has and needs, its status (waiting, or escalated
once its TTL passed under a policy that escalates: an admin decides it) and when it expires.
With -o json the one document is {"approvals": [...]}, with each request's decisions so far.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListApprovals(cmd.Context(), agent)
			switch {
			case err != nil:
				return err
			case g.json():
				return writeJSON(cmd.OutOrStdout(), list)
			case len(list.Approvals) == 0:
				fmt.Fprintln(cmd.ErrOrStderr(), "no job is held for approval")
				return nil
			}
			now := g.now()
			t := newTable(cmd.OutOrStdout(), "JOB ID", "TYPE", "AGENT", "POLICY", "APPROVALS", "STATUS", "EXPIRES", "APPROVED BY")
			for _, a := range list.Approvals {
				var by []string
				for _, d := range a.Decisions {
					by = append(by, d.Approver)
				}
				t.row(a.JobID, a.Type, a.Agent, a.Policy, strconv.Itoa(len(by))+"/"+strconv.Itoa(a.Required), a.Status,
					fmtTimePtr(a.ExpiresAt, now), orDash(strings.Join(by, ",")))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's jobs")
	return cmd
}

func newApprovalsDecideCmd(g *globals, approve bool) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "approve JOB_ID --reason TEXT",
		Short: "Approve a job held for approval",
		Long: `Approve a job held for approval (POST /jobs/{id}/approve), audited job.approved with you and
the reason. The approval that completes the request (the first; for a two-key policy the second
distinct approver's) releases the job: it runs, or waits for its parents when it has some. Your
second approval of one job is refused (already_decided). With -o json the one document is the
answer.

Exit codes: 0 recorded, 1 usage (no --reason), 2 the API refused it (not awaiting approval,
already decided, an escalated request and not an admin).`,
		Example: `  orchctl approvals approve train-42 --reason "budget approved in OPS-118"`,
		Args:    usageArgs(cobra.ExactArgs(1)),
	}
	act := (*client.Client).ApproveJob
	if !approve {
		cmd.Use, cmd.Short = "reject JOB_ID --reason TEXT", "Reject a job held for approval: it is cancelled"
		cmd.Long = `Reject a job held for approval (POST /jobs/{id}/reject): the request ends rejected and the job
is cancelled, the reason its last error ("rejected by approver:NAME: reason"); audited
job.rejected. With -o json the one document is the answer.

Exit codes: 0 recorded, 1 usage (no --reason), 2 the API refused it (not awaiting approval,
already decided, an escalated request and not an admin).`
		cmd.Example = `  orchctl approvals reject train-42 --reason "too many GPUs for a test run"`
		act = (*client.Client).RejectJob
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if reason == "" {
			return usageErrorf(cmd, "--reason is required: the audit records why")
		}
		c, err := g.client(cmd)
		if err != nil {
			return err
		}
		resp, err := act(c, cmd.Context(), args[0], reason)
		switch {
		case err != nil:
			return err
		case g.json():
			return writeJSON(cmd.OutOrStdout(), resp)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "job %s: %s (approval %s, %d/%d approvals)\n", resp.JobID, resp.JobStatus,
			resp.ApprovalStatus, resp.Approvals, resp.Required)
		return nil
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required, at most 1024 bytes): audited with you")
	return cmd
}

func newApprovalsPoliciesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "policies",
		Short: "Show the approval policies in force",
		Long: `Show the approval policies in force (GET /approvals/policies): the configuration's
(updated by "config") and those set at run time, in the order a submit is matched against them
(two-key first, then by name; the first that matches holds it): what each matches, whether it
needs two approvers, its TTL and what an expiry does. With -o json the one document is
{"policies": [...]}.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListApprovalPolicies(cmd.Context())
			switch {
			case err != nil:
				return err
			case g.json():
				return writeJSON(cmd.OutOrStdout(), list)
			}
			t := newTable(cmd.OutOrStdout(), "POLICY", "TYPE", "AGENT", "MIN GPUS", "MIN GPU MB", "TWO KEY", "TTL", "ON EXPIRY", "SET BY")
			for _, p := range list.Policies {
				t.row(p.Name, orDash(p.Type), orDash(p.Agent), strconv.Itoa(p.MinGPUs), strconv.FormatInt(p.MinGPUMemoryMB, 10),
					strconv.FormatBool(p.TwoKey), strconv.FormatInt(p.TTLSeconds, 10)+"s", p.OnExpiry, p.UpdatedBy)
			}
			return t.flush()
		},
	}
}
