package main

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// statusDoc is the -o json document of `status`.
type statusDoc struct {
	APIURL  string        `json:"api_url"`
	Healthz client.Health `json:"healthz"`
	Readyz  client.Health `json:"readyz"`
}

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether the orchestrator is alive and ready",
		Long: `Show whether the orchestrator is alive (GET /healthz) and ready to serve (GET /readyz), with
each readiness check: the MariaDB connection, the applied schema migrations, and Redis. A check
that fails says why ("down", or what to run, such as "orchestrator migrate").

The exit code is 0 when the orchestrator is ready and 2 when it is not ready or cannot be
reached. No token is needed. With -o json the one document is
{"api_url": ..., "healthz": {"status": ...}, "readyz": {"status": ..., "checks": {...}}}.

The leader, its term, queue depths, pools and GPUs will be shown here as the API grows.`,
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
	if len(doc.Readyz.Checks) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	t = newTable(out, "CHECK", "STATUS")
	for _, name := range slices.Sorted(maps.Keys(doc.Readyz.Checks)) {
		t.row(name, doc.Readyz.Checks[name])
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
