package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// policyResult is what `admission set|delete|restore` did to one agent's policy (an element of
// -o json's "results").
type policyResult struct {
	Agent   string                  `json:"agent"`
	Outcome string                  `json:"outcome"`
	Policy  *client.AdmissionPolicy `json:"policy,omitempty"`
	Error   string                  `json:"error,omitempty"`
}

// policyResults is the -o json document of `admission set|delete|restore`.
type policyResults struct {
	Results []policyResult `json:"results"`
}

// setFlags are the flags of `admission set`.
type setFlags struct {
	agent      string
	allAgents  bool
	rate       float64
	burst      int
	maxPending int
	maxMemory  int64
	maxGPUs    int
	enabled    bool
}

func newAdmissionSetCmd(g *globals) *cobra.Command {
	var f setFlags
	cmd := &cobra.Command{
		Use:   "set --agent A|'*' | --all-agents  [--rate R] [--burst B] [--max-pending N] [--max-gpus N] [--max-gpu-memory-mb MB] [--enabled=true|false]",
		Short: "Change an agent's admission policy (or the default, or all of them)",
		Long: `Change admission policies (PUT /control/admission). Only the fields given change: the others
keep the agent's current values (for an agent without a policy, the default policy's). When
--rate changes and --burst is not given, the burst becomes two seconds' worth of the new rate.

--agent '*' changes the default policy, which every agent without a policy of its own gets.
--all-agents changes the default policy and every agent's own policy: the way to throttle the
whole cluster at once. --enabled=false exempts an agent from its bucket, max_pending and its
GPU quota (not from the gates).

--max-gpus and --max-gpu-memory-mb are the agent's GPU quota: the most GPUs and GPU memory it
holds at once in active gpu leases (its running and placed jobs' and its own leases; a lease of
two GPUs counts two, as do two leases of one GPU). Over it, its GPU jobs wait (waiting_reason
quota) and its gpu lease requests are refused 429 quota. The default policy's quota caps each
agent without a policy of its own, not all of them together.

Throttle every submit and lease request in an emergency (at most one request per agent per
1000 seconds), after saving the current policies:

  orchctl admission get -o json > admission-before.json
  orchctl admission set --all-agents --rate 0.001 --burst 1 --enabled=true

and put them back with "orchctl admission restore admission-before.json".

Limits: rate 0.001..1000000 per second, burst 1..10000000, max_pending 0 (no cap)..100000000,
max_gpus 0 (no cap)..1048576, max_gpu_memory_mb 0 (no cap)..1073741824.
Exit codes: 0 every policy set; 2 none could be (a bad value is a 400 naming the field); 6 some
could not (--all-agents; each named on stderr). With -o json the one document is {"results":
[{"agent", "outcome", "policy", "error"}]}.`,
		Example: `  orchctl admission set --agent batch-embedder --rate 20 --max-pending 500
  orchctl admission set --agent '*' --rate 100
  orchctl admission set --agent trainer --max-gpus 2 --max-gpu-memory-mb 100000
  orchctl admission set --all-agents --rate 0.001 --burst 1 --enabled=true`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runWithFlags(g.setAdmission, &f),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.agent, "agent", "", `the agent whose policy changes ("*": the default policy)`)
	fl.BoolVar(&f.allAgents, "all-agents", false, "change the default policy and every agent's own policy")
	fl.Float64Var(&f.rate, "rate", 0, "sustained submits and lease requests per second")
	fl.IntVar(&f.burst, "burst", 0, "requests an idle bucket admits at once")
	fl.IntVar(&f.maxPending, "max-pending", 0, "cap on the agent's unfinished jobs (0: no cap)")
	fl.Int64Var(&f.maxMemory, "max-gpu-memory-mb", 0, "most GPU memory the agent holds at once, in MB (0: no cap)")
	fl.IntVar(&f.maxGPUs, "max-gpus", 0, "most GPUs the agent holds at once (0: no cap)")
	fl.BoolVar(&f.enabled, "enabled", true, "false exempts the agent from its bucket, max_pending and GPU quota")
	cmd.MarkFlagsMutuallyExclusive("agent", "all-agents")
	cmd.MarkFlagsOneRequired("agent", "all-agents")
	return cmd
}

// setAdmission runs `admission set`.
func (g *globals) setAdmission(cmd *cobra.Command, f *setFlags) error {
	changed := cmd.Flags().Changed
	var u client.AdmissionPolicyUpdate
	if changed("rate") {
		u.RatePerSec = &f.rate
	}
	if changed("burst") {
		u.Burst = &f.burst
	}
	if changed("max-pending") {
		u.MaxPending = &f.maxPending
	}
	if changed("max-gpu-memory-mb") {
		u.MaxGPUMemoryMB = &f.maxMemory
	}
	if changed("max-gpus") {
		u.MaxGPUs = &f.maxGPUs
	}
	if changed("enabled") {
		u.Enabled = &f.enabled
	}
	if u == (client.AdmissionPolicyUpdate{}) {
		return usageErrorf(cmd, "nothing to change: give --rate, --burst, --max-pending, --max-gpus, --max-gpu-memory-mb or --enabled")
	}
	c, err := g.client(cmd)
	if err != nil {
		return err
	}
	agents := []string{f.agent}
	if f.allAgents {
		st, err := c.GetAdmission(cmd.Context())
		if err != nil {
			return err
		}
		agents = []string{client.AdmissionDefaultAgent}
		for _, p := range st.Policies {
			agents = append(agents, p.Agent)
		}
		agents = dedupe(agents)
	}
	b := &batch{stderr: cmd.ErrOrStderr()}
	results := make([]policyResult, 0, len(agents))
	for _, agent := range agents {
		u.Agent = agent
		p, err := c.SetAdmissionPolicy(cmd.Context(), u)
		switch {
		case err == nil:
			b.ok()
			results = append(results, policyResult{Agent: agent, Outcome: outcomeSet, Policy: &p})
		case b.abort(err) || !f.allAgents:
			return err // one agent: its error is the answer
		default:
			b.fail(err)
			results = append(results, policyResult{Agent: agent, Outcome: outcomeFailed, Error: errorText(err)})
		}
	}
	if err := g.printPolicyResults(cmd, results); err != nil {
		return err
	}
	return b.verdict("set admission policies")
}

func newAdmissionRestoreCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "restore FILE|-",
		Short: `Put the policies back as a saved "admission get -o json" shows them`,
		Long: `Put the admission policies back as they were when "orchctl admission get -o json" saved FILE
("-": standard input): every policy in the file is set to its saved values, and every policy
stored now whose agent is not in the file is deleted (so a "*" policy stored during an emergency
goes, and the configured default policy applies again). The gates are not part of it: they
follow the cluster by themselves.

Exit codes: 0 every policy restored; 1 FILE cannot be read or is not such a document; 2 none
could be restored; 6 some could not (each named on stderr). With -o json the one document is
{"results": [{"agent", "outcome", "policy", "error"}]}.`,
		Example: `  orchctl admission restore admission-before.json`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			saved, err := g.readAdmissionFile(cmd, args[0])
			if err != nil {
				return err
			}
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			now, err := c.GetAdmission(cmd.Context())
			if err != nil {
				return err
			}
			b := &batch{stderr: cmd.ErrOrStderr()}
			results := []policyResult{}
			add := func(r policyResult, err error) error {
				if err != nil && b.abort(err) {
					return err
				}
				results = append(results, b.record(r, err))
				return nil
			}
			keep := map[string]bool{}
			for _, p := range saved.Policies {
				keep[p.Agent] = true
				stored, err := c.SetAdmissionPolicy(cmd.Context(), client.AdmissionPolicyUpdate{Agent: p.Agent,
					RatePerSec: &p.RatePerSec, Burst: &p.Burst, MaxPending: &p.MaxPending,
					MaxGPUMemoryMB: &p.MaxGPUMemoryMB, MaxGPUs: &p.MaxGPUs, Enabled: &p.Enabled})
				if err := add(policyResult{Agent: p.Agent, Outcome: outcomeSet, Policy: &stored}, err); err != nil {
					return err
				}
			}
			for _, p := range now.Policies {
				if keep[p.Agent] {
					continue
				}
				err := c.DeleteAdmissionPolicy(cmd.Context(), p.Agent)
				if err := add(policyResult{Agent: p.Agent, Outcome: outcomeDeleted}, err); err != nil {
					return err
				}
			}
			if err := g.printPolicyResults(cmd, results); err != nil {
				return err
			}
			return b.verdict("restore admission policies")
		},
	}
}

// record counts one policy change in the batch and returns its result (failed with the error
// when err is set).
func (b *batch) record(r policyResult, err error) policyResult {
	if err == nil {
		b.ok()
		return r
	}
	b.fail(err)
	return policyResult{Agent: r.Agent, Outcome: outcomeFailed, Error: errorText(err)}
}

// readAdmissionFile reads a saved `admission get -o json` document.
func (g *globals) readAdmissionFile(cmd *cobra.Command, path string) (client.AdmissionStatus, error) {
	var (
		raw []byte
		err error
	)
	if path == "-" {
		raw, err = io.ReadAll(g.stdin)
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return client.AdmissionStatus{}, usageErrorf(cmd, "read %s: %w", path, err)
	}
	var st client.AdmissionStatus
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&st); err != nil {
		return client.AdmissionStatus{}, usageErrorf(cmd, "%s is not the output of `orchctl admission get -o json`: %w", path, err)
	}
	if st.Policies == nil && !bytes.Contains(raw, []byte(`"policies"`)) {
		return client.AdmissionStatus{}, usageErrorf(cmd, "%s has no \"policies\": it is not the output of `orchctl admission get -o json`", path)
	}
	return st, nil
}

// printPolicyResults prints what `admission set|delete|restore` did.
func (g *globals) printPolicyResults(cmd *cobra.Command, results []policyResult) error {
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), policyResults{Results: results})
	}
	if len(results) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "nothing to change")
		return nil
	}
	t := newTable(cmd.OutOrStdout(), "AGENT", "RATE/S", "BURST", "MAX PENDING", "GPU QUOTA", "ENABLED", "RESULT")
	for _, r := range results {
		rate, burst, pending, quota, enabled := "-", "-", "-", "-", "-"
		if p := r.Policy; p != nil {
			rate, burst, pending, quota, enabled = fmtFloat(p.RatePerSec), strconv.Itoa(p.Burst), maxPending(p.MaxPending),
				gpuQuota(*p), yesNo(p.Enabled)
		}
		t.row(r.Agent, rate, burst, pending, quota, enabled, r.Outcome)
	}
	return t.flush()
}
