package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestAdmissionGetSet(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	r := b.runOK(t, "admission", "get")
	require.Regexp(t, `(?m)^ENABLED\s+yes$`, r.stdout)
	require.Regexp(t, `(?m)^DEFAULT POLICY\s+5000/s burst 10000, max_pending none, enabled \(from config\)$`, r.stdout)
	require.Regexp(t, `(?m)^GPU GATE\s+open: 0% used`, r.stdout)
	require.Contains(t, r.stdout, "no agent has a policy of its own")

	r = b.runOK(t, "admission", "set", "--agent", "alice", "--rate", "10", "--max-pending", "50")
	require.Equal(t, []string{"alice", "10", "20", "50", "none", "yes", "set"}, tableRows(t, r.stdout)[0], "%s", r)
	st := decodeJSON[client.AdmissionStatus](t, b.runOK(t, "admission", "get", "-o", "json"))
	require.Len(t, st.Policies, 1)
	require.Equal(t, 10.0, st.Policies[0].RatePerSec)
	require.Equal(t, 50, st.Policies[0].MaxPending)

	// Only the fields given change.
	doc := decodeJSON[policyResults](t, b.runOK(t, "admission", "set", "--agent", "alice", "--burst", "3", "-o", "json"))
	require.Equal(t, client.AdmissionPolicy{Agent: "alice", RatePerSec: 10, Burst: 3, MaxPending: 50, Enabled: true},
		withoutTime(*doc.Results[0].Policy))

	r = b.run(t, "admission", "set", "--agent", "alice", "--rate", "0")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "(field rate_per_sec)")

	// The GPU quota: shown in the tables, refused out of bounds naming the field.
	r = b.runOK(t, "admission", "set", "--agent", "alice", "--max-gpus", "2", "--max-gpu-memory-mb", "81920")
	require.Equal(t, []string{"alice", "10", "3", "50", "2", "GPUs,", "80.0G", "yes", "set"}, tableRows(t, r.stdout)[0], "%s", r)
	require.Regexp(t, `(?m)^alice\s+10\s+3\s+50\s+2 GPUs, 80.0G\s+yes`, b.runOK(t, "admission", "get").stdout)
	r = b.run(t, "admission", "set", "--agent", "alice", "--max-gpus", "-1")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "(field max_gpus)")

	r = b.runOK(t, "admission", "delete", "alice")
	require.Equal(t, []string{"alice", "-", "-", "-", "-", "-", "deleted"}, tableRows(t, r.stdout)[0], "%s", r)
	r = b.run(t, "admission", "delete", "alice")
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "404 not_found")

	for _, args := range [][]string{
		{"admission", "set", "--rate", "1"},
		{"admission", "set", "--agent", "alice"},
		{"admission", "set", "--agent", "alice", "--all-agents", "--rate", "1"},
		{"admission", "restore", filepath.Join(t.TempDir(), "missing.json")},
	} {
		r := b.run(t, args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r)
	}
}

// TestAdmissionEmergencyThrottle is the runbook's "stop admissions": save, throttle every
// agent, see submits refused, restore.
func TestAdmissionEmergencyThrottle(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.runOK(t, "admission", "set", "--agent", "bob", "--rate", "100", "--enabled=false")
	saved := filepath.Join(t.TempDir(), "admission-before.json")
	require.NoError(t, os.WriteFile(saved, []byte(b.runOK(t, "admission", "get", "-o", "json").stdout), 0o600))

	doc := decodeJSON[policyResults](t, b.runOK(t, "admission", "set", "--all-agents", "--rate", "0.001", "--burst", "1",
		"--enabled=true", "-o", "json"))
	require.Len(t, doc.Results, 2)
	for _, res := range doc.Results {
		require.Equal(t, outcomeSet, res.Outcome)
		require.Equal(t, client.AdmissionPolicy{Agent: res.Agent, RatePerSec: 0.001, Burst: 1, Enabled: true},
			withoutTime(*res.Policy))
	}
	require.Equal(t, []string{"*", "bob"}, []string{doc.Results[0].Agent, doc.Results[1].Agent})

	// One request per agent fits in the burst; the next is refused.
	submit := []string{"--api-url", b.url, "--token", b.alice, "jobs", "submit", "--type", "noop", "--agent", "alice"}
	r := orchctl(t, "", submit...)
	require.Equal(t, exitOK, r.code, "%s", r)
	r = orchctl(t, "", submit...)
	require.Equal(t, exitAPI, r.code, "%s", r)
	require.Contains(t, r.stderr, "429 rate_limited")

	r = b.runOK(t, "admission", "restore", saved)
	require.Equal(t, [][]string{{"bob", "100", "200", "none", "none", "no", "set"}, {"*", "-", "-", "-", "-", "-", "deleted"}},
		tableRows(t, r.stdout), "%s", r)
	st := decodeJSON[client.AdmissionStatus](t, b.runOK(t, "admission", "get", "-o", "json"))
	require.Equal(t, "config", st.DefaultSource)
	require.Len(t, st.Policies, 1)
	require.Equal(t, client.AdmissionPolicy{Agent: "bob", RatePerSec: 100, Burst: 200, Enabled: false}, withoutTime(st.Policies[0]))

	// From standard input too; a document of another kind is refused.
	r = orchctl(t, b.runOK(t, "admission", "get", "-o", "json").stdout,
		"--api-url", b.url, "--token", b.admin, "admission", "restore", "-")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = orchctl(t, `{"jobs": []}`, "--api-url", b.url, "--token", b.admin, "admission", "restore", "-")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, "it is not the output of `orchctl admission get -o json`")
}

// withoutTime drops a policy's update time, for comparisons.
func withoutTime(p client.AdmissionPolicy) client.AdmissionPolicy {
	p.UpdatedAt = nil
	return p
}
