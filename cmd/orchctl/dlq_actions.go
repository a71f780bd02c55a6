package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// dlqResult is what a replay or a purge did to one dead letter (an element of -o json's
// "results").
type dlqResult struct {
	JobID   string      `json:"job_id"`
	Outcome string      `json:"outcome"`
	Job     *client.Job `json:"job,omitempty"`
	Error   string      `json:"error,omitempty"`
}

// dlqResults is the -o json document of `dlq replay` (without --wait) and `dlq purge`.
type dlqResults struct {
	Results []dlqResult `json:"results"`
}

func newDLQReplayCmd(g *globals) *cobra.Command {
	var (
		f    dlqFlags
		wait bool
		o    waitOptions
	)
	cmd := &cobra.Command{
		Use:   "replay JOB_ID... | --all [--type T] [--agent A] [--error-contains TEXT] [--wait]",
		Short: "Send dead letters back to pending with a fresh attempt budget",
		Long: `Replay dead letters (POST /dlq/{job_id}/replay) once their cause is fixed: each job goes back to
pending at once with max_attempts raised by its type's max_attempts (attempts never go down), its
last error kept, its DLQ entry deleted, and it is published to its stream again.

Name the jobs, or use --all to replay every dead letter that matches --type, --agent and
--error-contains (the list is read first, so a job that dead-letters again during the replay is
not replayed twice). A job that is not in the queue (replayed or purged already, or never dead)
is refused (409 not_dead_letter).

With --wait, orchctl then waits for the replayed jobs like "jobs wait" (--poll, --wait-timeout) and
prints their final states instead of the replay's results. Exit codes: 0 every job replayed
(and, with --wait, done); 2 none could be replayed; 6 some could not (each named on stderr);
with --wait also 3 a job dead-lettered again, 4 one was cancelled, 5 --wait-timeout passed. With -o
json the one document is {"results": [{"job_id", "outcome", "job", "error"}]}, or with --wait
{"jobs": [...]}.`,
		Example: `  orchctl dlq replay job-1 job-2
  orchctl dlq replay --all --type inference --error-contains "connection refused" --wait --wait-timeout 30m`,
		ValidArgsFunction: completeFromAPI(g, 0, deadLetterIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait {
				if err := o.check(cmd); err != nil {
					return err
				}
			}
			c, results, b, err := g.dlqAction(cmd, args, &f, outcomeReplayed, (*client.Client).ReplayDeadLetter)
			if err != nil {
				return err
			}
			if !wait {
				if err := g.printDLQResults(cmd, results); err != nil {
					return err
				}
				return b.verdict("replay dead letters")
			}
			var ids []string
			for _, r := range results {
				if r.Outcome == outcomeReplayed {
					ids = append(ids, r.JobID)
				}
			}
			if len(ids) == 0 { // nothing to wait for: show why
				if err := g.printDLQResults(cmd, results); err != nil {
					return err
				}
				return b.verdict("replay dead letters")
			}
			if err := g.wait(cmd, c, ids, o, true); err != nil {
				return err
			}
			return b.verdict("replay dead letters")
		},
	}
	f.add(cmd, "with --all: ")
	fl := cmd.Flags()
	fl.BoolVar(&f.all, "all", false, "replay every dead letter that matches the filters")
	fl.BoolVar(&wait, "wait", false, "wait until the replayed jobs are finished (exit codes as jobs wait)")
	fl.DurationVar(&o.poll, "poll", pollDefault, "with --wait: time between polls")
	addWaitTimeoutFlag(cmd, &o.timeout, waitTimeoutDefault, "with --wait: give up after this long (exit code 5)")
	return cmd
}

func newDLQPurgeCmd(g *globals) *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "purge JOB_ID... | --all [--type T] [--agent A] [--error-contains TEXT]",
		Short: "Remove dead letters from the queue for good",
		Long: `Purge dead letters (DELETE /dlq/{job_id}): the job leaves the queue and its DLQ entry is
deleted; the job row stays dead_letter (with its payload and last error, for the record) until
retention deletes it, and it can no longer be replayed. Use it for jobs that must not run
again (bad input, an obsolete type).

Name the jobs, or use --all to purge every dead letter that matches --type, --agent and
--error-contains. A job that is not in the queue is refused (409 not_dead_letter).

Exit codes: 0 every job purged; 2 none could be; 6 some could not (each named on stderr).
With -o json the one document is {"results": [{"job_id", "outcome", "job", "error"}]}.`,
		Example: `  orchctl dlq purge job-1
  orchctl dlq purge --all --type legacy_ingest`,
		ValidArgsFunction: completeFromAPI(g, 0, deadLetterIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, results, b, err := g.dlqAction(cmd, args, &f, outcomePurged, (*client.Client).PurgeDeadLetter)
			if err != nil {
				return err
			}
			if err := g.printDLQResults(cmd, results); err != nil {
				return err
			}
			return b.verdict("purge dead letters")
		},
	}
	f.add(cmd, "with --all: ")
	cmd.Flags().BoolVar(&f.all, "all", false, "purge every dead letter that matches the filters")
	return cmd
}

// dlqAction replays or purges the named dead letters, or with --all every one that matches.
// The error is returned only when nothing could be attempted or the batch must stop.
func (g *globals) dlqAction(cmd *cobra.Command, ids []string, f *dlqFlags, outcome string,
	act func(*client.Client, context.Context, string) (client.Job, error)) (*client.Client, []dlqResult, *batch, error) {
	filtered := f.params.Type != "" || f.agent != "" || f.errorContains != ""
	switch {
	case f.all && len(ids) > 0:
		return nil, nil, nil, usageErrorf(cmd, "name jobs or use --all, not both")
	case !f.all && len(ids) == 0:
		return nil, nil, nil, usageErrorf(cmd, "name at least one job id, or use --all")
	case !f.all && filtered:
		return nil, nil, nil, usageErrorf(cmd, "--type, --agent and --error-contains select dead letters for --all only")
	}
	c, err := g.client(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	if f.all {
		sel := *f
		sel.params.Cursor, sel.params.Limit = "", 0
		page, err := listDeadLetters(cmd, c, &sel)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, d := range page.DeadLetters {
			ids = append(ids, d.JobID)
		}
	}
	b := &batch{stderr: cmd.ErrOrStderr()}
	results := []dlqResult{}
	for _, id := range dedupe(ids) {
		job, err := act(c, cmd.Context(), id)
		switch {
		case err == nil:
			b.ok()
			results = append(results, dlqResult{JobID: id, Outcome: outcome, Job: &job})
		case b.abort(err):
			return nil, nil, nil, err
		default:
			b.fail(err)
			results = append(results, dlqResult{JobID: id, Outcome: outcomeFailed, Error: errorText(err)})
		}
	}
	return c, results, b, nil
}

// printDLQResults prints what a replay or a purge did.
func (g *globals) printDLQResults(cmd *cobra.Command, results []dlqResult) error {
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), dlqResults{Results: results})
	}
	if len(results) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "no dead letter matched")
		return nil
	}
	t := newTable(cmd.OutOrStdout(), "JOB ID", "TYPE", "STATUS", "ATTEMPTS", "RESULT")
	for _, r := range results {
		typ, status, att := "-", "-", "-"
		if j := r.Job; j != nil {
			typ, status, att = j.Type, j.Status, attempts(*j)
		}
		t.row(r.JobID, typ, status, att, r.Outcome)
	}
	return t.flush()
}
