package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/nodelabels"
)

// Job states as the API shows them (docs/architecture.md, "Job states"). The client package has no constants for
// them; these are the ones orchctl must know: which are terminal, and what --status completes to.
const (
	statusAwaitingApproval = "awaiting_approval"
	statusWaiting          = "waiting"
	statusPending          = "pending"
	statusClaimed          = "claimed"
	statusRunning          = "running"
	statusDone             = "done"
	statusFailed           = "failed"
	statusDeadLetter       = "dead_letter"
	statusCancelled        = "cancelled"
)

// jobStatuses lists every job state in lifecycle order (progress lines count them in this order).
var jobStatuses = []string{statusAwaitingApproval, statusWaiting, statusPending, statusClaimed, statusRunning, statusDone,
	statusFailed, statusDeadLetter, statusCancelled}

// terminal reports whether nothing automatic changes a job in this state any more.
func terminal(status string) bool {
	return status == statusDone || status == statusDeadLetter || status == statusCancelled
}

func newJobsCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "jobs",
		Short: "Submit, inspect, list, cancel and wait for jobs",
		Long: `Submit, inspect, list, cancel and wait for jobs.

A job moves pending → claimed → running → done; a failed attempt goes back to pending with
backoff until its attempts are used up, then to dead_letter. Any job that has not finished can be
cancelled. done, dead_letter and cancelled are terminal.`,
	}, newJobsSubmitCmd(g), newJobsSubmitBatchCmd(g), newJobsGetCmd(g), newJobsWhyCmd(g), newJobsListCmd(g),
		newJobsCancelCmd(g), newJobsWaitCmd(g), newJobsWatchCmd(g))
}

// submitFlags are the flags of `jobs submit`.
type submitFlags struct {
	req         client.SubmitRequest
	payload     string
	payloadFile string
	maxAttempts int
	timeout     time.Duration
	resources   client.Resources
	constraints client.Constraints
	fanOut      client.FanOut
	priority    int
	quiet       bool
	wait        bool
	waitOpts    waitOptions
}

func newJobsSubmitCmd(g *globals) *cobra.Command {
	var f submitFlags
	cmd := &cobra.Command{
		Use:   "submit --type TYPE --agent AGENT [--payload JSON | --payload-file FILE|-] [flags]",
		Short: "Submit a job",
		Long: `Submit a job of a configured type for an agent and print its id and status.

The payload is any JSON value, given inline with --payload, read from a file with --payload-file,
or read from standard input with --payload-file -. Without either, the payload is {}.

--job-id makes the submit idempotent: submitting an id that exists already does not create a
second job but reports the existing one ("exists") with its current status. Without it the
orchestrator generates an id.

--max-attempts and --timeout override the job type's attempt budget and per-attempt run-time
limit. --gpus, --gpu-memory-mb and --exclusive override what the type asks of the GPUs: that
many distinct GPUs of one node, that much memory on each, held alone; a request no node of the
cluster could ever place is refused (unsatisfiable). --node-selector, --allow-node, --deny-node
and --max-per-node constrain the nodes a job may be placed on (orchctl nodes list shows their
labels); --pool and --model route it to the workers of one pool, or of a pool serving the model.
--depends-on makes the job wait (status waiting) until those jobs of the same agent have ended
done; one that ends dead_letter or cancelled cancels it, unless --on-parent-failure run.
--fan-out-all, --fan-out-node and --fan-out-selector run the job once on each node of a group (a
child "<job id>.<node>" per node; the job is their parent and ends when they all have);
--fan-out-strategy continue lets every child run when one fails. --quiet prints only the job id
(for JOB=$(orchctl jobs submit ... -q)).

With --wait, orchctl then waits for the job like "jobs wait" (--poll, --wait-timeout) and exits
with its exit codes: 0 done, 3 dead_letter, 4 cancelled, 5 timed out. With -o json and --wait,
the one document printed is the wait's ({"jobs": [job]}); without --wait it is the submit answer
({"job_id", "status", "created"}).`,
		Example: `  orchctl jobs submit --type noop --agent ops --payload '{"n": 1}'
  orchctl jobs submit --type inference --agent chat --payload-file req.json --job-id req-42 --wait
  orchctl jobs submit --type train --agent ml --gpus 2 --gpu-memory-mb 60000 --exclusive
  orchctl jobs submit --type train --agent ml --node-selector tier=prod --deny-node gpu-07 --max-per-node 1
  orchctl jobs submit --type report --agent etl --depends-on extract-1,extract-2
  orchctl jobs submit --type upgrade --agent ops --fan-out-selector zone=a --fan-out-strategy continue
  generate-payload | orchctl jobs submit --type ingest --agent etl --payload-file - -q`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runWithFlags(g.submit, &f),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.req.Type, "type", "", "job type (one of the server's configured job types)")
	fl.StringVar(&f.req.Agent, "agent", "", "agent the job is submitted for")
	fl.StringVar(&f.payload, "payload", "", "payload as inline JSON (default {})")
	fl.StringVar(&f.payloadFile, "payload-file", "", "read the payload from FILE, or from standard input when -")
	fl.StringVar(&f.req.JobID, "job-id", "", "stable job id (A-Z a-z 0-9 . _ : -, at most 128); a repeat reports the existing job")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "attempt budget (default: the job type's)")
	fl.DurationVar(&f.timeout, "timeout", 0, "per-attempt run-time limit (default: the job type's)")
	fl.IntVar(&f.resources.GPUs, "gpus", 0, "GPUs of one node the job needs, 1..8 (default: the job type's, one)")
	fl.IntVar(&f.resources.GPUMemoryMB, "gpu-memory-mb", 0, "GPU memory the job needs on each GPU, in MB (default: the job type's)")
	fl.BoolVar(&f.resources.Exclusive, "exclusive", false, "hold the GPUs alone: nothing else is placed on them")
	fl.StringToStringVar(&f.constraints.NodeSelector, "node-selector", nil,
		"only on nodes with this label, KEY=VALUE (repeat, or comma-separate, for several)")
	fl.StringSliceVar(&f.constraints.AllowNodes, "allow-node", nil, "only on this node (repeat for several)")
	fl.StringSliceVar(&f.constraints.DenyNodes, "deny-node", nil, "never on this node (repeat for several)")
	fl.IntVar(&f.constraints.MaxPerNode, "max-per-node", 0, "at most this many jobs of this type and agent on one node at once")
	fl.StringVar(&f.req.PoolID, "pool", "", "only the workers of this pool run the job")
	fl.StringVar(&f.req.ModelID, "model", "", "only the workers of a pool serving this model run the job")
	fl.StringSliceVar(&f.req.DependsOn, "depends-on", nil, "wait until these jobs (of the same agent) have ended done (repeat, or comma-separate)")
	fl.StringVar(&f.req.OnParentFailure, "on-parent-failure", "", "with --depends-on: cancel (default) or run when a parent fails")
	fl.BoolVar(&f.fanOut.All, "fan-out-all", false, "run the job once on every ready node")
	fl.StringSliceVar(&f.fanOut.Nodes, "fan-out-node", nil, "run the job once on this node (repeat for several)")
	fl.StringToStringVar(&f.fanOut.NodeSelector, "fan-out-selector", nil, "run the job once on each ready node with this label, KEY=VALUE")
	fl.StringVar(&f.fanOut.Strategy, "fan-out-strategy", "", "fail_fast (default: a failing child cancels the others) or continue")
	fl.IntVar(&f.priority, "priority", 0, "0..9, higher first among GPU jobs waiting for room (default: the job type's)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print only the job id")
	fl.BoolVar(&f.wait, "wait", false, "wait until the job is finished (exit codes as jobs wait)")
	fl.DurationVar(&f.waitOpts.poll, "poll", pollDefault, "with --wait: time between polls")
	fl.DurationVar(&f.waitOpts.timeout, "wait-timeout", waitTimeoutDefault, "with --wait: give up after this long (exit code 5)")
	_ = cmd.MarkFlagRequired("type")
	_ = cmd.MarkFlagRequired("agent")
	cmd.MarkFlagsMutuallyExclusive("payload", "payload-file")
	return cmd
}

// submit runs `jobs submit`.
func (g *globals) submit(cmd *cobra.Command, f *submitFlags) error {
	req := f.req
	payload, err := g.readPayload(cmd, f)
	if err != nil {
		return err
	}
	req.Payload = payload
	if cmd.Flags().Changed("max-attempts") {
		req.MaxAttempts = &f.maxAttempts
	}
	if cmd.Flags().Changed("timeout") {
		d := client.Duration(f.timeout)
		req.Timeout = &d
	}
	if cmd.Flags().Changed("priority") {
		req.Priority = &f.priority
	}
	if fl := cmd.Flags(); fl.Changed("gpus") || fl.Changed("gpu-memory-mb") || fl.Changed("exclusive") {
		r := f.resources
		req.Resources = &r
	}
	if c := f.constraints; len(c.NodeSelector) > 0 || len(c.AllowNodes) > 0 || len(c.DenyNodes) > 0 || c.MaxPerNode != 0 {
		req.Constraints = &c
	}
	if fo := f.fanOut; fo.All || len(fo.Nodes) > 0 || len(fo.NodeSelector) > 0 || fo.Strategy != "" {
		req.FanOut = &fo
	}
	if f.wait {
		if err := f.waitOpts.check(cmd); err != nil {
			return err
		}
	}
	c, err := g.client(cmd)
	if err != nil {
		return err
	}
	resp, err := c.Submit(cmd.Context(), req)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	switch {
	case f.quiet:
		fmt.Fprintln(out, resp.JobID)
	case g.json() && f.wait:
		// The wait prints the one document.
	case g.json():
		return writeJSON(out, resp)
	default:
		verb := "exists"
		if resp.Created {
			verb = "created"
		}
		t := newTable(out, "JOB ID", "STATUS", "SUBMIT")
		t.row(resp.JobID, resp.Status, verb)
		if err := t.flush(); err != nil {
			return err
		}
	}
	if !f.wait {
		return nil
	}
	return g.wait(cmd, c, []string{resp.JobID}, f.waitOpts, !f.quiet)
}

// readPayload returns the payload of --payload or --payload-file (standard input for "-"),
// checked to be JSON, or {} when neither is given.
func (g *globals) readPayload(cmd *cobra.Command, f *submitFlags) (json.RawMessage, error) {
	var (
		raw    []byte
		source string
	)
	switch {
	case cmd.Flags().Changed("payload"):
		raw, source = []byte(f.payload), "--payload"
	case f.payloadFile == "-":
		b, err := io.ReadAll(g.stdin)
		if err != nil {
			return nil, fmt.Errorf("read payload from standard input: %w", err)
		}
		raw, source = b, "the payload on standard input"
	case f.payloadFile != "":
		b, err := os.ReadFile(f.payloadFile)
		if err != nil {
			return nil, usageErrorf(cmd, "--payload-file: %w", err)
		}
		raw, source = b, "--payload-file "+f.payloadFile
	default:
		return json.RawMessage(`{}`), nil
	}
	if !json.Valid(raw) {
		return nil, usageErrorf(cmd, "%s is not valid JSON", source)
	}
	return raw, nil
}

func newJobsGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get JOB_ID",
		Short: "Show one job",
		Long: `Show one job: its status, attempts, worker, why it waits and the node the scheduler placed it
on, timestamps, last error, payload and result.

The table cuts the payload, result and last error at ` + strconv.Itoa(maxFieldValue) + ` characters; -o json prints the
job exactly as the API returns it. An agent token sees only its own agent's jobs (any other is
"not found").`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: g.onJob(func(w io.Writer, job client.Job) error {
			if g.json() {
				return writeJSON(w, job)
			}
			return g.printJob(w, job)
		}),
	}
}

// onJob is the RunE of a command that reads the job its argument names and shows it on
// standard output with show.
func (g *globals) onJob(show func(w io.Writer, job client.Job) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := g.client(cmd)
		if err != nil {
			return err
		}
		job, err := c.GetJob(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return show(cmd.OutOrStdout(), job)
	}
}

// printJob prints one job as a two-column table of its fields.
func (g *globals) printJob(w io.Writer, j client.Job) error {
	now := g.now()
	enqueued := "no"
	if j.Enqueued {
		enqueued = "yes"
		if j.StreamID != "" {
			enqueued += " (entry " + j.StreamID + ")"
		}
	}
	gpu := "no (CPU job)"
	if j.GPUMemoryMB > 0 {
		gpu = gpuRequest(j)
	}
	t := newTable(w)
	for _, kv := range [][2]string{
		{"JOB ID", j.JobID},
		{"TYPE", j.Type},
		{"AGENT", j.Agent},
		{"STATUS", j.Status},
		{"ATTEMPTS", attempts(j)},
		{"WORKER", orDash(j.WorkerID)},
		{"POOL", orDash(j.OwnerPool)},
		{"GPU", gpu},
		{"WAITING", orDash(j.WaitingReason)},
		{"PLACED ON", orDash(placedOn(j))},
		{"ROUTE", orDash(route(j))},
		{"CONSTRAINTS", fmtConstraints(j.Constraints)},
		{"WAITS FOR", orDash(waitsFor(j))},
		{"TIMEOUT", time.Duration(j.Timeout).String()},
		{"ENQUEUED", enqueued},
		{"AVAILABLE AT", fmtTime(j.AvailableAt, now)},
		{"CREATED", fmtTime(j.CreatedAt, now)},
		{"UPDATED", fmtTime(j.UpdatedAt, now)},
		{"STARTED", fmtTimePtr(j.StartedAt, now)},
		{"FINISHED", fmtTimePtr(j.FinishedAt, now)},
		{"LAST ERROR", orDash(truncate(j.LastError, maxFieldValue))},
		{"PAYLOAD", fmtRaw(j.Payload, maxFieldValue)},
		{"RESULT", fmtRaw(j.Result, maxFieldValue)},
	} {
		t.row(kv[0], kv[1])
	}
	return t.flush()
}

// waitsFor says what a job of a flow waits for: its depends_on, or a fan-out's children by
// node ("node-a=fo.node-a node-b=fo.node-b").
func waitsFor(j client.Job) string {
	if len(j.FanOutChildren) > 0 {
		return "fan-out children " + nodelabels.String(j.FanOutChildren)
	}
	return strings.Join(j.DependsOn, ",")
}

// placedOn says where a pending job is placed: "node-7", or "node-7, for pool mistral".
func placedOn(j client.Job) string {
	if j.PlacedNode == "" || j.PlacedPool == "" {
		return j.PlacedNode
	}
	return j.PlacedNode + ", for pool " + j.PlacedPool
}

// route says where a job was routed: "pool mistral", "model m1", or "".
func route(j client.Job) string {
	var parts []string
	if j.PoolID != "" {
		parts = append(parts, "pool "+j.PoolID)
	}
	if j.ModelID != "" {
		parts = append(parts, "model "+j.ModelID)
	}
	return strings.Join(parts, ", ")
}

// fmtConstraints says a job's constraints in one line: "node_selector tier=prod; deny_nodes
// gpu-07; max_per_node 1", or "-".
func fmtConstraints(c *client.Constraints) string {
	if c == nil {
		return "-"
	}
	var parts []string
	if len(c.NodeSelector) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(c.NodeSelector)) {
			kv = append(kv, k+"="+c.NodeSelector[k])
		}
		parts = append(parts, "node_selector "+strings.Join(kv, ","))
	}
	if len(c.AllowNodes) > 0 {
		parts = append(parts, "allow_nodes "+strings.Join(c.AllowNodes, ","))
	}
	if len(c.DenyNodes) > 0 {
		parts = append(parts, "deny_nodes "+strings.Join(c.DenyNodes, ","))
	}
	if c.MaxPerNode > 0 {
		parts = append(parts, "max_per_node "+strconv.Itoa(c.MaxPerNode))
	}
	return orDash(truncate(strings.Join(parts, "; "), maxFieldValue))
}

func newJobsCancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel JOB_ID",
		Short: "Cancel a job that has not finished",
		Long: `Cancel a job that has not finished (pending, claimed or running).

A running job's worker learns of the cancellation on its next call to the orchestrator and
stops the handler; a result it reports afterwards is ignored. Cancelling a job that is already
done, dead_letter or cancelled is refused (409 job_terminal, exit code 2).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			job, err := c.CancelJob(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), job)
			}
			t := newTable(cmd.OutOrStdout(), "JOB ID", "STATUS", "ATTEMPTS", "WORKER")
			t.row(job.JobID, job.Status, attempts(job), orDash(job.WorkerID))
			return t.flush()
		},
	}
}
