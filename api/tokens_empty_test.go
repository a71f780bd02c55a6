package api

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoadTokensNoneConfigured checks that a tokens setting that holds no token is an error
// naming it, not "no token configured": a server would refuse everyone, and dev mode would
// admit loopback callers as admin without a token.
func TestLoadTokensNoneConfigured(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, line, err := GenerateToken("admin", "")
	require.NoError(t, err)
	for name, content := range map[string]string{"empty": "", "blank": "\n  \n\t\n", "comments": "# admins\n  # (none yet)\n"} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		_, err := LoadTokens(path, "")
		require.ErrorContains(t, err, path, name)
		require.ErrorContains(t, err, "holds no token", name)
		_, err = LoadTokens(path, line)
		require.ErrorContains(t, err, path, "a token in %s does not make the file right", TokensEnv)
	}
	for _, env := range []string{" ", ";", " ; # nothing"} {
		_, err := LoadTokens("", env)
		require.ErrorContains(t, err, TokensEnv+" is set but holds no token record", "%q", env)
	}
	set, err := LoadTokens("", "")
	require.NoError(t, err, "nothing configured at all is not an error")
	require.Zero(t, set.Len())
}
