package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// TestEveryCommandDocumentsItself: the help texts are the operator's documentation. Every
// command of ours says what it does at length; every command that changes something says
// which exit codes it ends with.
func TestEveryCommandDocumentsItself(t *testing.T) {
	t.Parallel()
	root := newRootCmd(&globals{getenv: func(string) string { return "" }})
	var seen []string
	walk(root, func(c *cobra.Command) {
		if c.Name() == "help" || c.Name() == "completion" || (c.Parent() != nil && c.Parent().Name() == "completion") {
			return
		}
		seen = append(seen, c.CommandPath())
		require.NotEmpty(t, c.Short, c.CommandPath())
		require.Greater(t, len(c.Long), 150, "%s needs a Long help text", c.CommandPath())
	})
	for _, path := range []string{"orchctl leases release", "orchctl pools drain", "orchctl pools evict",
		"orchctl dlq replay", "orchctl dlq purge", "orchctl admission set", "orchctl admission restore",
		"orchctl control drain", "orchctl control reconcile", "orchctl jobs submit-batch"} {
		require.Contains(t, seen, path)
		cmd, _, err := root.Find(strings.Fields(path)[1:])
		require.NoError(t, err)
		require.Contains(t, strings.ToLower(cmd.Long), "exit code", "%s documents its exit codes", path)
	}
}

func TestOperatorCommandsHelpAndCompletion(t *testing.T) {
	t.Parallel()

	t.Run("RootListsExitCode6", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "--help")
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Contains(t, r.stdout, "  6    partly done:")
		for _, group := range []string{"admission", "control", "dlq", "gpus", "leases", "nodes", "pools"} {
			require.Regexp(t, `(?m)^  `+group+`\s`, r.stdout)
		}
	})

	t.Run("GroupWithoutSubcommandShowsHelp", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "pools")
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Contains(t, r.stdout, "Available Commands:")
	})

	t.Run("CompletesLeaseStatus", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "__complete", "leases", "list", "--status", "exp")
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Contains(t, r.stdout, "expired\n")
	})

	t.Run("CompletesSubcommands", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "__complete", "pools", "")
		require.Equal(t, exitOK, r.code, "%s", r)
		for _, sub := range []string{"create", "drain", "evict", "get", "list", "scale"} {
			require.Contains(t, r.stdout, sub+"\t")
		}
	})
}

// TestCompletesFromTheAPI: pool ids and dead letters' job ids complete from the running
// orchestrator, with the global flags; an unreachable one completes nothing, quickly.
func TestCompletesFromTheAPI(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.createPool(t, "mistral", 0)
	b.createPool(t, "llama", 0)
	b.submit(t, "dead-1", "ops")
	b.deadLetter(t, "dead-1", "boom")
	b.submit(t, "dead-2", "ops")
	b.deadLetter(t, "dead-2", "boom")

	r := b.runOK(t, "__complete", "pools", "drain", "")
	require.Contains(t, r.stdout, "llama\nmistral\n")
	r = b.runOK(t, "__complete", "pools", "scale", "mis")
	require.True(t, strings.HasPrefix(r.stdout, "mistral\n:4\n"), "%s", r)
	r = b.runOK(t, "__complete", "pools", "scale", "mistral", "")
	require.NotContains(t, r.stdout, "llama", "the second argument is a number")
	r = b.runOK(t, "__complete", "dlq", "replay", "dead-1", "")
	require.True(t, strings.HasPrefix(r.stdout, "dead-2\n:4\n"), "ids given already are not offered: %s", r)

	r = orchctl(t, "", "--api-url", closedURL(t), "__complete", "pools", "evict", "")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.True(t, strings.HasPrefix(r.stdout, ":4\n"), "%s", r)
}
