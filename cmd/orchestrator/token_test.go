package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
)

// TestReloadTokens: a reload adds and revokes tokens at once; a tokens file that does not load,
// or that holds no token any more, leaves the tokens in use.
func TestReloadTokens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	newToken := func() (token, line string) {
		token, line, err := api.GenerateToken("admin", "")
		require.NoError(t, err)
		return token, line
	}
	write := func(lines ...string) {
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	}
	oldTok, oldLine := newToken()
	newTok, newLine := newToken()
	write(oldLine)
	current, err := api.LoadTokens(path, "")
	require.NoError(t, err)

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	srv := api.New(api.Options{Auth: api.AuthOptions{Tokens: current}, Logger: log})
	status := func(token string) int {
		req := httptest.NewRequest(http.MethodGet, "/control/admission", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	require.NotEqual(t, http.StatusUnauthorized, status(oldTok))
	require.Equal(t, http.StatusUnauthorized, status(newTok))

	// Rotate: the new token in, the old one out.
	write(newLine)
	current = reloadTokens(srv, path, "", current, log)
	require.Equal(t, 1, current.Len())
	require.Equal(t, http.StatusUnauthorized, status(oldTok), "revoked without a restart")
	require.NotEqual(t, http.StatusUnauthorized, status(newTok))
	require.Contains(t, logs.String(), "tokens reloaded")
	require.Contains(t, logs.String(), "added=["+api.HashToken(newTok)[:8]+"]")
	require.Contains(t, logs.String(), "removed=["+api.HashToken(oldTok)[:8]+"]")

	// A malformed file, then an empty one: the tokens in use stay.
	for _, lines := range [][]string{{newLine, "not a record"}, {"# nothing left"}} {
		logs.Reset()
		write(lines...)
		kept := reloadTokens(srv, path, "", current, log)
		require.Same(t, current, kept)
		require.NotEqual(t, http.StatusUnauthorized, status(newTok), "still accepted after %q", lines)
		require.Contains(t, logs.String(), "tokens not reloaded")
	}
}

// TestTokenCreateScoped: `token create --role worker --types a,b --pool p` prints a token whose
// tokens-file line carries the scope; the scope flags are refused on other roles.
func TestTokenCreateScoped(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (string, error) {
		cmd := tokenCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(append([]string{"create"}, args...))
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run("--role", "worker", "--types", "noop,sleep", "--pool", "pool-a")
	require.NoError(t, err)
	var token, line string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "token: "); ok {
			token = v
		}
		if v, ok := strings.CutPrefix(l, "tokens file line: "); ok {
			line = v
		}
	}
	require.Equal(t, api.HashToken(token)+" worker types=noop,sleep pool=pool-a", line)
	set, err := api.LoadTokens("", line)
	require.NoError(t, err)
	rec, ok := set.Lookup(token)
	require.True(t, ok)
	require.Equal(t, []string{"noop", "sleep"}, rec.Types)
	require.Equal(t, "pool-a", rec.Pool)

	out, err = run("--role", "worker")
	require.NoError(t, err)
	require.Regexp(t, `tokens file line: [0-9a-f]{64} worker\n`, out, "unscoped as before")

	_, err = run("--role", "admin", "--types", "noop")
	require.ErrorContains(t, err, "only for role worker")
	_, err = run("--role", "agent", "--agent", "alice", "--pool", "p")
	require.ErrorContains(t, err, "only for role worker")
	_, err = run("--role", "worker", "--types", "")
	require.Error(t, err)
}
