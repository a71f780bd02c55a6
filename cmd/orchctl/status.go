package main

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// statusDoc is the -o json document of `status`.
type statusDoc struct {
	APIURL  string        `json:"api_url"`
	Healthz client.Health `json:"healthz"`
	Readyz  client.Health `json:"readyz"`
	// Cluster is GET /status (leader, term, queues); absent without a token.
	Cluster *client.Status `json:"cluster,omitempty"`
}

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether the orchestrator is alive and ready, its leader, term and queues",
		Long: `Show whether the orchestrator is alive (GET /healthz) and ready to serve (GET /readyz), with
each readiness check: the MariaDB connection, the applied schema migrations, and Redis. A check
that fails says why ("down", or what to run, such as "orchestrator migrate").

With a token (any role) it also shows the cluster (GET /status): which instance leads, in which
term and since when, and every job type's stream: its length and the entries delivered but not
yet acknowledged.

The exit code is 0 when the orchestrator is ready and 2 when it is not ready or cannot be
reached. No token is needed for the health part. With -o json the one document is
{"api_url": ..., "healthz": {...}, "readyz": {"status": ..., "checks": {...}}, "cluster": {...}}.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			doc := statusDoc{APIURL: g.apiURL}
			if doc.Healthz, err = c.Healthz(cmd.Context()); err != nil {
				return err
			}
			doc.Readyz, err = c.Readyz(cmd.Context())
			if err != nil && !client.IsStatus(err, http.StatusServiceUnavailable) {
				return err
			}
			if g.token != "" {
				if st, serr := c.Status(cmd.Context()); serr == nil {
					doc.Cluster = &st
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "orchctl: cluster status unavailable: %v\n", serr)
				}
			}
			if err := g.printStatus(cmd, doc); err != nil {
				return err
			}
			if err != nil {
				return &exitError{code: exitAPI, msg: "not ready: " + failingChecks(doc.Readyz)}
			}
			return nil
		},
	}
}

// printStatus prints the status document as JSON or as tables.
func (g *globals) printStatus(cmd *cobra.Command, doc statusDoc) error {
	out := cmd.OutOrStdout()
	if g.json() {
		return writeJSON(out, doc)
	}
	t := newTable(out)
	t.row("API", doc.APIURL)
	t.row("HEALTHZ", orDash(doc.Healthz.Status))
	t.row("READYZ", orDash(doc.Readyz.Status))
	if err := t.flush(); err != nil {
		return err
	}
	if len(doc.Readyz.Checks) > 0 {
		fmt.Fprintln(out)
		t = newTable(out, "CHECK", "STATUS")
		for _, name := range slices.Sorted(maps.Keys(doc.Readyz.Checks)) {
			t.row(name, doc.Readyz.Checks[name])
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if doc.Cluster != nil {
		return g.printCluster(out, *doc.Cluster)
	}
	return nil
}

// printCluster prints the leader and the queues of GET /status.
func (g *globals) printCluster(out io.Writer, st client.Status) error {
	fmt.Fprintln(out)
	t := newTable(out)
	if st.Leader != nil {
		t.row("LEADER", st.Leader.LeaderID)
		t.row("TERM", fmt.Sprint(st.Leader.Term))
		t.row("SINCE", st.Leader.Since.Local().Format(time.RFC3339)+" ("+fmtAge(g.now().Sub(st.Leader.Since))+" ago)")
	} else {
		t.row("LEADER", "none elected")
	}
	t.row("THIS INSTANCE LEADS", fmt.Sprint(st.ThisInstanceLeads))
	for _, part := range slices.Sorted(maps.Keys(st.Errors)) {
		t.row("UNAVAILABLE", part)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	t = newTable(out, "TYPE", "STREAM", "LENGTH", "UNACKED")
	for _, q := range st.Queues {
		t.row(q.Type, q.Stream, fmt.Sprint(q.Length), fmt.Sprint(q.PendingEntries))
	}
	return t.flush()
}

// failingChecks names the checks that are not "ok": "mysql: down; migrations: ...".
func failingChecks(h client.Health) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(h.Checks)) {
		if v := h.Checks[name]; v != "ok" {
			parts = append(parts, name+": "+v)
		}
	}
	if len(parts) == 0 {
		return "the server answered 503"
	}
	return strings.Join(parts, "; ")
}
