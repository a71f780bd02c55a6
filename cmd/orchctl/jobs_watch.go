package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newJobsWatchCmd(g *globals) *cobra.Command {
	var since int64
	cmd := &cobra.Command{
		Use:   "watch JOB_ID [--since EVENT_ID]",
		Short: "Follow a job's events as they happen; the exit code says how it ended",
		Long: `Follow the job's event feed (GET /jobs/{id}/events): every transition from the audit trail,
one line each (with -o json, one JSON object per line), from its submission or from after
--since. A dropped connection is resumed where it stopped, so no event is shown twice or
missed. The command returns when the job is finished, with the exit codes of jobs wait:
0 done, 3 dead_letter, 4 cancelled, 2 API error.`,
		Example: `  orchctl jobs watch job-1
  orchctl jobs watch job-1 -o json | jq .event_type`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			lines := json.NewEncoder(out) // one compact object per line
			status, err := c.WatchJob(cmd.Context(), args[0], since, func(ev client.Event) error {
				if g.json() {
					return lines.Encode(ev)
				}
				_, err := fmt.Fprintf(out, "%d\t%s\t%-28s %s%s\n", ev.ID, ev.TS.Local().Format(time.TimeOnly+".000"),
					ev.EventType, orDash(ev.Actor), detailsSuffix(ev.Details))
				return err
			})
			if err != nil {
				return err
			}
			if !g.json() {
				fmt.Fprintf(out, "job %s is %s\n", args[0], status)
			}
			return waitVerdict([]client.Job{{JobID: args[0], Status: status}}, false, 0)
		},
	}
	cmd.Flags().Int64Var(&since, "since", 0, "start after this event id (as printed in the first column)")
	return cmd
}

// detailsSuffix shows an event's details compactly, or nothing.
func detailsSuffix(raw []byte) string {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" || s == "{}" {
		return ""
	}
	return "  " + truncate(s, 160)
}
