package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
)

func TestAuthErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("NoTokenExits2WithHint", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "--api-url", b.url, "--token", "", "jobs", "list")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "orchctl: list jobs: 401 unauthorized: missing bearer token")
		require.Contains(t, r.stderr, "hint: no API token was sent: set $ORCH_API_TOKEN or pass --token")
	})

	t.Run("UnknownToken", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "--api-url", b.url, "--token", "orch_not-a-real-token", "jobs", "get", "x")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "401 unauthorized: unknown token")
		require.Contains(t, r.stderr, "hint: the server does not accept the token of --token / $ORCH_API_TOKEN")
	})

	t.Run("ForbiddenExits2WithHint", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "--api-url", b.url, "--token", b.alice, "jobs", "submit", "--type", "noop", "--agent", "bob")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "403 forbidden")
		require.Contains(t, r.stderr, "hint: the token of --token / $ORCH_API_TOKEN may not do this")
	})

	t.Run("EnvironmentDefaults", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{envAPIURL: b.url, envAPIToken: b.admin + "\n"}
		var out, errOut bytes.Buffer
		code := runWith([]string{"jobs", "list", "-o", "json"}, strings.NewReader(""), &out, &errOut,
			func(k string) string { return env[k] })
		require.Equal(t, exitOK, code, "stderr: %s", errOut.String())
		require.JSONEq(t, `{"jobs": []}`, out.String())
	})

	t.Run("FlagsOutrankEnvironment", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{envAPIURL: closedURL(t), envAPIToken: "orch_wrong"}
		var out, errOut bytes.Buffer
		code := runWith([]string{"--api-url", b.url, "--token", b.admin, "jobs", "list"}, strings.NewReader(""),
			&out, &errOut, func(k string) string { return env[k] })
		require.Equal(t, exitOK, code, "stderr: %s", errOut.String())
	})

	t.Run("UnreachableExits2WithHint", func(t *testing.T) {
		t.Parallel()
		url := closedURL(t)
		r := orchctl(t, "", "--api-url", url, "--token", b.admin, "jobs", "get", "x")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "connection refused")
		require.Contains(t, r.stderr, "hint: is the orchestrator running at "+url+"?")
	})
}

func TestStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "--api-url", b.url, "--token", "", "status") // no token needed
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Regexp(t, `^API\s+`+b.url+`\nHEALTHZ\s+ok\nREADYZ\s+ok\n\nCHECK\s+STATUS\n`+
			`migrations\s+ok\nmysql\s+ok\nredis\s+ok\n$`, r.stdout)
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		doc := decodeJSON[statusDoc](t, b.runOK(t, "status", "-o", "json"))
		require.Equal(t, b.url, doc.APIURL)
		require.Equal(t, "ok", doc.Healthz.Status)
		require.Equal(t, "ok", doc.Readyz.Status)
		require.Equal(t, map[string]string{"mysql": "ok", "migrations": "ok", "redis": "ok"}, doc.Readyz.Checks)
	})

	t.Run("NotReadyExits2", func(t *testing.T) {
		t.Parallel()
		opts := b.opts
		opts.Ready = func(context.Context) map[string]error {
			return map[string]error{"mysql": nil, "redis": errors.New("dial tcp: connection refused"),
				"migrations": &api.CheckError{Reason: "no migration applied: run `orchestrator migrate`"}}
		}
		url := serve(t, opts)
		r := orchctl(t, "", "--api-url", url, "status")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Regexp(t, `READYZ\s+unavailable\n`, r.stdout)
		require.Regexp(t, `redis\s+down\n`, r.stdout)
		require.Equal(t, "orchctl: not ready: migrations: no migration applied: run `orchestrator migrate`; redis: down\n", r.stderr)
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "--api-url", closedURL(t), "status")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "orchctl: check healthz: ")
	})
}

// TestUsage covers what fails before any API call: no server is needed.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"UnknownFlag", []string{"jobs", "list", "--bogus"}, "orchctl: unknown flag: --bogus\nRun 'orchctl jobs list --help' for usage.\n"},
		{"UnknownCommand", []string{"frobnicate"}, "orchctl: unknown command \"frobnicate\" for \"orchctl\"\nRun 'orchctl --help' for usage.\n"},
		{"UnknownSubcommand", []string{"jobs", "frobnicate"}, `orchctl: unknown command "frobnicate" for "orchctl jobs"`},
		{"MissingRequiredFlag", []string{"jobs", "submit", "--type", "noop"}, `orchctl: required flag(s) "agent" not set`},
		{"PayloadFlagsExclusive", []string{"jobs", "submit", "--type", "noop", "--agent", "a", "--payload", "{}", "--payload-file", "-"}, "none of the others can be"},
		{"ArgCount", []string{"jobs", "get"}, "orchctl: accepts 1 arg(s), received 0\nRun 'orchctl jobs get --help' for usage.\n"},
		{"BadOutput", []string{"-o", "yaml", "jobs", "list"}, `orchctl: --output "yaml": want table or json`},
		{"BadURL", []string{"--api-url", "127.0.0.1:8080", "jobs", "list"}, `orchctl: API URL "127.0.0.1:8080": want http(s)://host[:port]`},
		{"BadLimit", []string{"--api-url", "http://127.0.0.1:1", "jobs", "list", "--limit", "-1"}, "orchctl: --limit must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := orchctl(t, "", tc.args...)
			require.Equal(t, exitUsage, r.code, "%s", r)
			require.Contains(t, r.stderr, tc.want)
			require.Empty(t, r.stdout)
		})
	}
}

func TestHelpAndCompletion(t *testing.T) {
	t.Parallel()
	t.Run("WaitHelpListsExitCodes", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "jobs", "wait", "--help")
		require.Equal(t, exitOK, r.code, "%s", r)
		for _, want := range []string{"  0  every job is done", "  3  at least one job ended in dead_letter",
			"  4  at least one job ended cancelled", "  5  --wait-timeout passed"} {
			require.Contains(t, r.stdout, want)
		}
	})

	t.Run("JobsWithoutSubcommandShowsHelp", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "jobs")
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Contains(t, r.stdout, "Available Commands:")
	})

	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run("Completion"+shell, func(t *testing.T) {
			t.Parallel()
			r := orchctl(t, "", "completion", shell)
			require.Equal(t, exitOK, r.code, "%s", r)
			require.Contains(t, r.stdout, "orchctl")
			require.Empty(t, r.stderr)
		})
	}

	t.Run("CompletesStatusValues", func(t *testing.T) {
		t.Parallel()
		r := orchctl(t, "", "__complete", "jobs", "list", "--status", "dead")
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Contains(t, r.stdout, "dead_letter\n")
	})
}
