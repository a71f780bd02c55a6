package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// Exit codes of orchctl. Scripts rely on them: never renumber, only add.
const (
	exitOK          = 0   // success
	exitUsage       = 1   // bad command line or local input (flags, payload file), or another local error
	exitAPI         = 2   // the API refused the call (401, 403, 404, 409, 429, 5xx) or could not be reached
	exitDeadLetter  = 3   // a wait on jobs: at least one job ended in dead_letter
	exitCancelled   = 4   // a wait on jobs: at least one job ended cancelled (and none dead_letter)
	exitTimeout     = 5   // a wait (on jobs, pools drain/evict, control drain) timed out
	exitPartial     = 6   // a command acting on several items (leases release, dlq replay/purge, admission set/restore, jobs submit-batch) did only some
	exitInterrupted = 130 // SIGINT or SIGTERM (the shell convention 128+2)
)

// Defaults of the global flags.
const (
	apiURLDefault         = "http://127.0.0.1:8080"
	requestTimeoutDefault = client.TimeoutDefault
	userAgent             = "orchctl/1"
)

// Environment variables read for the defaults of the global flags: the same names the worker
// reads, so one environment serves both.
const (
	envAPIURL   = "ORCH_API_URL"
	envAPIToken = "ORCH_API_TOKEN"
)

// Output formats of -o.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// globals are the global flags and the process's plumbing, shared by every command.
type globals struct {
	apiURL         string
	token          string
	output         string
	requestTimeout time.Duration

	getenv    func(string) string
	stdin     io.Reader
	stderrTTY bool             // stderr is a terminal: progress lines are redrawn in place
	now       func() time.Time // the clock of ages and durations in tables
}

// run executes orchctl with args (without the program name) and returns the exit code. main
// calls it; tests call it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runWith(args, stdin, stdout, stderr, os.Getenv)
}

// runWith is run with the environment lookup injected, so tests can set ORCH_* variables
// without touching the process environment.
func runWith(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &globals{getenv: getenv, stdin: stdin, stderrTTY: isTerminal(stderr), now: time.Now}
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return g.report(ctx, stderr, root.ExecuteContext(ctx))
}

// newRootCmd builds the command tree over g.
func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "orchctl",
		Short: "Operate a GPU Orchestrator: jobs, leases, pools, dead letters, admission, GPUs",
		Long: `orchctl is the operator CLI of GPU Orchestrator. It talks to the orchestrator's HTTP API.

The API is found with --api-url (default $ORCH_API_URL, else ` + apiURLDefault + `) and
authenticated with --token (default $ORCH_API_TOKEN). Create a token with
"orchestrator token create --role admin" and add its line to the server's tokens file.

Output is a human table by default; -o json prints the API's JSON as one document, for scripts.

Exit codes:
  0    success
  1    usage error (flags, arguments, local input) or another local error
  2    the API refused the call (401/403 auth, 404, 409, 429, 5xx) or could not be reached
  3    a job waited for ended in dead_letter (jobs wait|watch, jobs submit --wait,
       dlq replay --wait)
  4    a job waited for ended cancelled (and none in dead_letter)
  5    a wait timed out (jobs wait, the --wait of jobs submit, dlq replay, pools drain|evict
       and control drain)
  6    partly done: a command acting on several items (leases release, dlq replay|purge,
       admission set --all-agents, admission restore, jobs submit-batch) did only some; each
       failure is on stderr
  130  interrupted (SIGINT, SIGTERM)

The procedures of docs/runbook.md (evict a pool, drain the cluster, a dead leader, a GPU
out-of-memory emergency, Redis data loss, MariaDB failover, DLQ replay, token rotation) are
written with these commands.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          usageArgs(cobra.NoArgs),
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return g.resolve(cmd)
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&g.apiURL, "api-url", "", "orchestrator API URL (default $"+envAPIURL+", else "+apiURLDefault+")")
	f.StringVar(&g.token, "token", "", "API bearer token (default $"+envAPIToken+")")
	f.StringVarP(&g.output, "output", "o", outputTable, "output format: table or json")
	f.DurationVar(&g.requestTimeout, "request-timeout", requestTimeoutDefault, "time limit of each API call")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]string{outputTable, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{cmd: cmd, err: err} })

	root.AddCommand(newJobsCmd(g), newStatusCmd(g), newLeasesCmd(g), newPoolsCmd(g), newDLQCmd(g),
		newAdmissionCmd(g), newControlCmd(g), newGPUsCmd(g), newNodesCmd(g), newSchedulesCmd(g),
		newWebhooksCmd(g), newWorkflowsCmd(g), newApprovalsCmd(g))
	walk(root, func(c *cobra.Command) {
		if c.PreRunE == nil && c.PreRun == nil {
			c.PreRunE = checkFlags
		}
	})
	return root
}

// walk calls fn on cmd and every command below it.
func walk(cmd *cobra.Command, fn func(*cobra.Command)) {
	fn(cmd)
	for _, c := range cmd.Commands() {
		walk(c, fn)
	}
}

// checkFlags warns of deprecated flags, and runs cobra's checks of required and mutually
// exclusive flags ahead of cobra, so that their failures are usage errors (exit code 1, a
// pointer to --help).
func checkFlags(cmd *cobra.Command, _ []string) error {
	warnDeprecated(cmd)
	if err := cmd.ValidateRequiredFlags(); err != nil {
		return usageError{cmd: cmd, err: err}
	}
	if err := cmd.ValidateFlagGroups(); err != nil {
		return usageError{cmd: cmd, err: err}
	}
	return nil
}

// resolve fills the global flags an operator left out from the environment and checks them.
func (g *globals) resolve(cmd *cobra.Command) error {
	flags := cmd.Flags()
	if !flags.Changed("api-url") {
		g.apiURL = strings.TrimSpace(g.getenv(envAPIURL))
		if g.apiURL == "" {
			g.apiURL = apiURLDefault
		}
	}
	if !flags.Changed("token") {
		g.token = strings.TrimSpace(g.getenv(envAPIToken))
	}
	switch g.output {
	case outputTable, outputJSON:
	default:
		return usageErrorf(cmd, "--output %q: want %s or %s", g.output, outputTable, outputJSON)
	}
	if g.requestTimeout <= 0 {
		return usageErrorf(cmd, "--request-timeout must be positive")
	}
	return nil
}

// client returns an API client for the global flags.
func (g *globals) client(cmd *cobra.Command) (*client.Client, error) {
	u, err := url.Parse(g.apiURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf(cmd, "API URL %q: want http(s)://host[:port] (--api-url or $%s)", g.apiURL, envAPIURL)
	}
	// HTTPS to an API whose certificate a private CA signs: ORCH_TLS_CA (and, where the API
	// asks for one, a client certificate: ORCH_TLS_CLIENT_CERT / ORCH_TLS_CLIENT_KEY).
	tlsCfg, err := client.TLSConfig(g.getenv("ORCH_TLS_CA"), g.getenv("ORCH_TLS_CLIENT_CERT"), g.getenv("ORCH_TLS_CLIENT_KEY"))
	if err != nil {
		return nil, usageErrorf(cmd, "%v", err)
	}
	return client.New(g.apiURL, g.token, client.WithTimeout(g.requestTimeout), client.WithUserAgent(userAgent),
		client.WithTLSConfig(tlsCfg)), nil
}

// json reports whether -o json was asked for.
func (g *globals) json() bool { return g.output == outputJSON }

// usageError is a mistake on the command line: exit code 1 and a pointer to the help.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usageErrorf builds a usageError of cmd.
func usageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// groupCmd makes cmd, whose Use, Short and Long are set, the parent of subs: it takes no
// arguments and, run without a subcommand, prints its help.
func groupCmd(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.Args = usageArgs(cobra.NoArgs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	cmd.AddCommand(subs...)
	return cmd
}

// runWithFlags is the RunE of a command that takes no arguments: it calls run with the command
// and its flags f.
func runWithFlags[F any](run func(*cobra.Command, *F) error, f *F) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error { return run(cmd, f) }
}

// usageArgs wraps a positional-argument check so its failure is a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{cmd: cmd, err: err}
		}
		return nil
	}
}

// exitError ends orchctl with a specific code (jobs wait); msg, when set, goes to stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// report prints err as "orchctl: <message>" (plus a hint where one helps) and returns the exit
// code it stands for.
func (g *globals) report(ctx context.Context, stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var (
		exit   *exitError
		usage  usageError
		apiErr *client.APIError
		urlErr *url.Error
	)
	switch {
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintf(stderr, "orchctl: %s\n", exit.msg)
		}
		return exit.code
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "orchctl: interrupted")
		return exitInterrupted
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "orchctl: %s\nRun '%s --help' for usage.\n", err, usage.cmd.CommandPath())
		return exitUsage
	case errors.As(err, &apiErr):
		fmt.Fprintf(stderr, "orchctl: %s\n", err)
		if hint := g.authHint(apiErr); hint != "" {
			fmt.Fprintf(stderr, "hint: %s\n", hint)
		}
		return exitAPI
	case errors.As(err, &urlErr):
		fmt.Fprintf(stderr, "orchctl: %s\nhint: is the orchestrator running at %s? Set --api-url or $%s.\n",
			err, g.apiURL, envAPIURL)
		return exitAPI
	}
	fmt.Fprintf(stderr, "orchctl: %s\n", err)
	return exitUsage
}

// authHint explains a 401 or 403 in terms of orchctl's token settings.
func (g *globals) authHint(e *client.APIError) string {
	switch {
	case e.StatusCode == http.StatusUnauthorized && g.token == "":
		return "no API token was sent: set $" + envAPIToken + " or pass --token " +
			"(create one with `orchestrator token create --role admin`)"
	case e.StatusCode == http.StatusUnauthorized:
		return "the server does not accept the token of --token / $" + envAPIToken +
			": check that its line is in the server's tokens file"
	case e.StatusCode == http.StatusForbidden:
		return "the token of --token / $" + envAPIToken + " may not do this: " +
			"use an admin token, or the agent's own token for its jobs"
	}
	return ""
}
