package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// Page sizes of GET /leases (api.LeaseListLimitDefault and api.LeaseListLimitMax; a test keeps
// them equal). orchctl does not import the server's packages.
const (
	leaseListLimitDefault = 100
	leaseListLimitMax     = 1000
)

// leaseStatuses are the states of a lease, for --status and its completion.
var leaseStatuses = []string{client.LeaseActive, client.LeaseReleased, client.LeaseExpired}

func newLeasesCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "leases",
		Short: "List and release leases: the GPU memory and CPU slots jobs and agents hold",
		Long: `List and release leases.

Nothing runs without a lease. A worker's job holds one from its claim to its result (the JOB
column names it); an agent may hold leases of its own (POST /leases) to reserve GPU memory for
work outside the orchestrator. A lease moves active → released (given back) or active → expired
(not renewed within its TTL: its holder is gone, and a job's attempt is retried). Nothing
brings an ended lease back.`,
	}, newLeasesListCmd(g), newLeasesReleaseCmd(g))
}

func newLeasesListCmd(g *globals) *cobra.Command {
	var p client.ListLeasesParams
	cmd := &cobra.Command{
		Use:   "list [--status S] [--agent A] [--node N] [--job J] [--limit N]",
		Short: "List leases, newest first",
		Long: `List leases, newest first (GET /leases), at most --limit of them (the server's default is ` +
			strconv.Itoa(leaseListLimitDefault) + `, its maximum ` + strconv.Itoa(leaseListLimitMax) + `).

What to look for:
  - active leases without a JOB: an agent's own reservations. They hold GPU memory until
    released or expired; release them with "orchctl leases release".
  - an EXPIRES in the past on an active lease: its holder stopped renewing; the leader's purger
    expires it within leases.purge_interval (and retries its job).
  - the GPU and MEMORY columns against "orchctl gpus": what leases reserve on each GPU.

With -o json the one document is {"leases": [...]}. An agent token lists its own leases only.`,
		Example: `  orchctl leases list --status active
  orchctl leases list --status active --node gpu-node-3 -o json | jq -r '.leases[] | select(.job_id == null) | .token'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.Limit < 0 {
				return usageErrorf(cmd, "--limit must not be negative")
			}
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListLeases(cmd.Context(), p)
			if err != nil {
				return err
			}
			if list.Leases == nil {
				list.Leases = []client.Lease{}
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list.Leases) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no leases")
				return nil
			}
			return g.printLeases(cmd, list.Leases)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&p.Status, "status", "", "only leases in this state ("+strings.Join(leaseStatuses, ", ")+")")
	fl.StringVar(&p.Agent, "agent", "", "only leases held for this agent")
	fl.StringVar(&p.NodeID, "node", "", "only leases on this node")
	fl.StringVar(&p.JobID, "job", "", "only the leases of this job")
	fl.IntVar(&p.Limit, "limit", 0, "at most this many (default: the server's)")
	_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(leaseStatuses, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// printLeases prints leases as a table, one row each.
func (g *globals) printLeases(cmd *cobra.Command, leases []client.Lease) error {
	now := g.now()
	t := newTable(cmd.OutOrStdout(), "TOKEN", "AGENT", "JOB", "NODE", "GPU", "MODE", "MEMORY", "STATUS", "EXPIRES")
	for _, l := range leases {
		expires := "-"
		if l.Status == client.LeaseActive {
			expires = fmtRelative(l.ExpiresAt, now)
		}
		t.row(l.Token, l.Agent, orDash(l.JobID), l.NodeID, fmtGPUIndex(l.GPUIndex, l.Exclusive), l.Mode,
			fmtMB(l.MemoryMB), l.Status, expires)
	}
	return t.flush()
}

// releaseFlags are the flags of `leases release`.
type releaseFlags struct {
	all    bool
	params client.ListLeasesParams
	gpu    int
}

// leaseResult is what `leases release` did to one lease (an element of -o json's "results").
type leaseResult struct {
	Token   string        `json:"token"`
	Outcome string        `json:"outcome"`
	Lease   *client.Lease `json:"lease,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// leaseResults is the -o json document of `leases release`.
type leaseResults struct {
	Results []leaseResult `json:"results"`
}

func newLeasesReleaseCmd(g *globals) *cobra.Command {
	var f releaseFlags
	cmd := &cobra.Command{
		Use:   "release TOKEN... | --all [--agent A] [--node N] [--gpu I]",
		Short: "Give leases back: their GPU memory is free for placement at once",
		Long: `Release leases (POST /leases/{token}/release): active → released. The memory they reserved is
free for the next placement at once; the holder's next heartbeat is refused (410).

Name the leases by token, or use --all to release every active lease that matches --agent,
--node and --gpu (all of them without a filter). --all releases agents' own leases only: a
job's lease ends with its job, so it is skipped (outcome skipped_job_lease) — cancel the job
("orchctl jobs cancel") or evict its pool ("orchctl pools evict"), which rescues the job and ends
its lease. A job's lease named by token is refused (409 lease_bound_to_job).

Releasing a lease that was released already succeeds again; one that expired meanwhile is
reported as already_expired, and counts as success: it holds nothing either way.

Exit codes: 0 every lease named or matched is released (or had ended); 2 none could be; 6 some
could not (each is named on stderr). With -o json the one document is {"results": [{"token",
"outcome", "lease", "error"}]}.`,
		Example: `  orchctl leases release lt_0123456789abcdef0123456789abcdef
  orchctl leases release --all --node gpu-node-3 --gpu 1
  orchctl leases release --all --agent batch-embedder -o json`,
		RunE: func(cmd *cobra.Command, args []string) error { return g.release(cmd, args, &f) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.all, "all", false, "release every active agent lease that matches the filters")
	fl.StringVar(&f.params.Agent, "agent", "", "with --all: only leases held for this agent")
	fl.StringVar(&f.params.NodeID, "node", "", "with --all: only leases on this node")
	fl.IntVar(&f.gpu, "gpu", 0, "with --all: only leases on this GPU index (of --node)")
	return cmd
}

// release runs `leases release`.
func (g *globals) release(cmd *cobra.Command, tokens []string, f *releaseFlags) error {
	filtered := cmd.Flags().Changed("agent") || cmd.Flags().Changed("node") || cmd.Flags().Changed("gpu")
	switch {
	case f.all && len(tokens) > 0:
		return usageErrorf(cmd, "name leases by token or use --all, not both")
	case !f.all && len(tokens) == 0:
		return usageErrorf(cmd, "name at least one lease token, or use --all")
	case !f.all && filtered:
		return usageErrorf(cmd, "--agent, --node and --gpu select leases for --all only")
	case cmd.Flags().Changed("gpu") && f.params.NodeID == "":
		return usageErrorf(cmd, "--gpu needs --node: GPU indexes are per node")
	}
	c, err := g.client(cmd)
	if err != nil {
		return err
	}
	b := &batch{stderr: cmd.ErrOrStderr()}
	var results []leaseResult
	if f.all {
		if results, err = g.releaseAll(cmd, c, f, b); err != nil {
			return err
		}
	} else {
		for _, tok := range dedupe(tokens) {
			r, err := releaseOne(cmd, c, tok, b)
			if err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	if err := g.printReleases(cmd, results); err != nil {
		return err
	}
	return b.verdict("release leases")
}

// releaseAll releases every active agent lease matching the filters, listing again while a
// full page came back (more may match than one list shows).
func (g *globals) releaseAll(cmd *cobra.Command, c *client.Client, f *releaseFlags, b *batch) ([]leaseResult, error) {
	p := f.params
	p.Status, p.Limit = client.LeaseActive, leaseListLimitMax
	seen := map[string]bool{}
	results := []leaseResult{}
	for {
		list, err := c.ListLeases(cmd.Context(), p)
		if err != nil {
			return nil, err
		}
		fresh := 0
		for _, l := range list.Leases {
			if seen[l.Token] || (cmd.Flags().Changed("gpu") && (l.GPUIndex == nil || *l.GPUIndex != f.gpu)) {
				continue
			}
			seen[l.Token] = true
			fresh++
			if l.JobID != "" {
				results = append(results, leaseResult{Token: l.Token, Outcome: outcomeSkippedJobLease, Lease: &l})
				continue
			}
			r, err := releaseOne(cmd, c, l.Token, b)
			if err != nil {
				return nil, err
			}
			results = append(results, r)
		}
		if len(list.Leases) < p.Limit || fresh == 0 {
			return results, nil
		}
	}
}

// releaseOne releases one lease. Its error is returned only when the whole batch must stop
// (an auth refusal); any other failure is counted in b and shown in the result.
func releaseOne(cmd *cobra.Command, c *client.Client, token string, b *batch) (leaseResult, error) {
	l, err := c.ReleaseLease(cmd.Context(), token)
	switch {
	case err == nil:
		b.ok()
		return leaseResult{Token: token, Outcome: outcomeReleased, Lease: &l}, nil
	case isAPICode(err, http.StatusGone, client.CodeLeaseExpired):
		b.ok()
		return leaseResult{Token: token, Outcome: outcomeAlreadyExpired}, nil
	case b.abort(err):
		return leaseResult{}, err
	case isAPICode(err, http.StatusConflict, client.CodeLeaseBoundToJob):
		err = fmt.Errorf("%w (hint: cancel its job with `orchctl jobs cancel`, or evict its pool)", err)
	}
	b.fail(err)
	return leaseResult{Token: token, Outcome: outcomeFailed, Error: errorText(err)}, nil
}

// printReleases prints what `leases release` did.
func (g *globals) printReleases(cmd *cobra.Command, results []leaseResult) error {
	if results == nil {
		results = []leaseResult{}
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), leaseResults{Results: results})
	}
	if len(results) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "no active lease matched")
		return nil
	}
	t := newTable(cmd.OutOrStdout(), "TOKEN", "AGENT", "JOB", "NODE", "GPU", "MEMORY", "RESULT")
	skipped := 0
	for _, r := range results {
		agent, job, node, gpu, mem := "-", "-", "-", "-", "-"
		if l := r.Lease; l != nil {
			agent, job, node, gpu, mem = l.Agent, orDash(l.JobID), l.NodeID, fmtGPUIndex(l.GPUIndex, l.Exclusive), fmtMB(l.MemoryMB)
		}
		if r.Outcome == outcomeSkippedJobLease {
			skipped++
		}
		t.row(r.Token, agent, job, node, gpu, mem, r.Outcome)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if skipped > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "%d job leases were left alone: they end with their jobs "+
			"(orchctl jobs cancel JOB_ID, or orchctl pools evict POOL_ID)\n", skipped)
	}
	return nil
}

// fmtGPUIndex shows a lease's GPU: its index, "-" for a CPU lease, with "(excl)" when exclusive.
func fmtGPUIndex(idx *int, exclusive bool) string {
	if idx == nil {
		return "-"
	}
	s := strconv.Itoa(*idx)
	if exclusive {
		s += "(excl)"
	}
	return s
}
