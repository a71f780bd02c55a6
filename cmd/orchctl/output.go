package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// Widths at which table cells are cut; -o json always shows everything.
const (
	maxCellError  = 60  // last_error in a list row
	maxFieldValue = 200 // payload, result and last_error in `jobs get`
)

// writeJSON prints v as one indented JSON document. HTML characters stay as they are: the
// output is for jq and scripts, not for a browser.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// table is a tab-separated table aligned with text/tabwriter. Cells are cleaned of tabs and
// newlines, so a value cannot break the layout.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

// row adds one row.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = oneLine(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// flush writes the aligned table.
func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// oneLine replaces the control characters that would break a table row with spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

// truncate cuts s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// orDash shows an empty value as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fmtTime shows an instant in UTC with its age: "2025-01-02T03:04:05Z (3m ago)".
func fmtTime(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	s := t.UTC().Format(time.RFC3339)
	d := now.Sub(t)
	if d >= 0 {
		return s + " (" + fmtAge(d) + " ago)"
	}
	return s + " (in " + fmtAge(-d) + ")"
}

// fmtTimePtr is fmtTime of an optional instant.
func fmtTimePtr(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t, now)
}

// fmtAge shows a duration the way kubectl shows ages: 45s, 12m, 5h, 3d.
func fmtAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// fmtRaw shows a JSON value on one line, cut to n runes with a pointer to -o json when cut.
func fmtRaw(raw json.RawMessage, n int) string {
	if len(raw) == 0 {
		return "-"
	}
	s := string(raw)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return truncate(s, n) + fmt.Sprintf(" (%d bytes; -o json shows all)", len(raw))
}

// attempts shows "attempts/max".
func attempts(j client.Job) string {
	return strconv.Itoa(j.Attempts) + "/" + strconv.Itoa(j.MaxAttempts)
}

// isTerminal reports whether w is a terminal (a progress line may then be redrawn in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// onID is the RunE of a command on the one object its argument names: it calls the API with
// call (a method expression of *client.Client, such as (*client.Client).GetSchedule) and
// shows the answer, as JSON with -o json, else with show.
func onID[T any](g *globals, call func(c *client.Client, ctx context.Context, id string) (T, error),
	show func(cmd *cobra.Command, v T) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := g.client(cmd)
		if err != nil {
			return err
		}
		v, err := call(c, cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if g.json() {
			return writeJSON(cmd.OutOrStdout(), v)
		}
		return show(cmd, v)
	}
}

// onDelete is the RunE of a command that deletes the one object its argument names with call
// and says so on standard error.
func onDelete(g *globals, what string, call func(c *client.Client, ctx context.Context, id string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := g.client(cmd)
		if err != nil {
			return err
		}
		if err := call(c, cmd.Context(), args[0]); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "deleted %s %s\n", what, args[0])
		return nil
	}
}
