package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGenerateToken(t *testing.T) {
	t.Parallel()

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		token, line, err := GenerateToken("agent", "alice")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(token, TokenPrefix))
		require.Len(t, token, len(TokenPrefix)+43) // 32 bytes, base64url without padding
		require.Equal(t, HashToken(token)+" agent agent=alice", line)

		set, err := LoadTokens("", line)
		require.NoError(t, err)
		rec, ok := set.Lookup(token)
		require.True(t, ok)
		require.Equal(t, RoleAgent, rec.Role)
		require.Equal(t, "alice", rec.Agent)
		require.Equal(t, HashToken(token)[:8], rec.ID())

		_, ok = set.Lookup(token + "x")
		require.False(t, ok)
		_, ok = set.Lookup("")
		require.False(t, ok)
	})
	t.Run("Unique", func(t *testing.T) {
		t.Parallel()
		a, _, err := GenerateToken("admin", "")
		require.NoError(t, err)
		b, _, err := GenerateToken("admin", "")
		require.NoError(t, err)
		require.NotEqual(t, a, b)
	})
	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct{ role, agent string }{
			{"root", ""}, {"", ""}, {"agent", ""}, {"agent", "has space"}, {"worker", "alice"},
		} {
			_, _, err := GenerateToken(c.role, c.agent)
			require.Error(t, err, "role %q agent %q", c.role, c.agent)
		}
	})
}

// TestScopedWorkerToken: a worker token's scope (types, pool) goes into its tokens-file line
// and comes back from it.
func TestScopedWorkerToken(t *testing.T) {
	t.Parallel()
	token, line, err := NewToken(TokenRecord{Role: RoleWorker, Types: []string{"noop", "sleep"}, Pool: "pool-a"})
	require.NoError(t, err)
	require.Equal(t, HashToken(token)+" worker types=noop,sleep pool=pool-a", line)
	set, err := LoadTokens("", line+";"+HashToken("plain")+" worker")
	require.NoError(t, err)
	require.True(t, set.scoped)
	rec, ok := set.Lookup(token)
	require.True(t, ok)
	require.Equal(t, []string{"noop", "sleep"}, rec.Types)
	require.Equal(t, "pool-a", rec.Pool)
	require.True(t, rec.Scoped())
	plain, ok := set.Lookup("plain")
	require.True(t, ok)
	require.False(t, plain.Scoped(), "a worker token without keys keeps today's reach")

	unscoped, err := LoadTokens("", HashToken("plain")+" worker")
	require.NoError(t, err)
	require.False(t, unscoped.scoped)

	for _, bad := range []TokenRecord{
		{Role: RoleAgent, Agent: "alice", Types: []string{"noop"}},
		{Role: RoleWorker, Types: []string{}},
		{Role: RoleWorker, Pool: "has space"},
	} {
		_, _, err := NewToken(bad)
		require.Error(t, err, "%+v", bad)
	}
}

func TestLoadTokensFile(t *testing.T) {
	t.Parallel()
	hash := func(s string) string { return HashToken(s) }
	write := func(t *testing.T, content string) string {
		path := filepath.Join(t.TempDir(), "tokens")
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		path := write(t, "# orchestrator tokens\n\n"+
			hash("a")+" agent agent=alice   # alice's laptop\n"+
			"  "+strings.ToUpper(hash("w"))+"\tworker\n"+
			hash("x")+" admin\n")
		set, err := LoadTokens(path, hash("e")+" admin; ;"+hash("b")+" agent agent=bob")
		require.NoError(t, err)
		require.Equal(t, 5, set.Len())
		for token, role := range map[string]Role{"a": RoleAgent, "w": RoleWorker, "x": RoleAdmin, "e": RoleAdmin, "b": RoleAgent} {
			rec, ok := set.Lookup(token)
			require.True(t, ok, token)
			require.Equal(t, role, rec.Role, token)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		set, err := LoadTokens("", "")
		require.NoError(t, err)
		require.Zero(t, set.Len())
		_, ok := set.Lookup("anything")
		require.False(t, ok)
		require.Zero(t, (*Tokens)(nil).Len())
	})
	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		_, err := LoadTokens(filepath.Join(t.TempDir(), "nope"), "")
		require.ErrorIs(t, err, os.ErrNotExist)
	})

	bad := []struct {
		name, line, want string
	}{
		{"NotAHash", "orch_secret admin", "SHA-256"},
		{"ShortHash", hash("a")[:63] + " admin", "SHA-256"},
		{"MissingRole", hash("a"), "missing role"},
		{"UnknownRole", hash("a") + " root", `role "root"`},
		{"AgentWithoutName", hash("a") + " agent", "agent=<name>"},
		{"AgentBadName", hash("a") + " agent agent=a/b", `agent "a/b"`},
		{"AgentOnWorker", hash("a") + " worker agent=alice", "only for role agent"},
		{"UnknownKey", hash("a") + " agent colour=blue", `unknown key "colour"`},
		{"NameOnAgent", hash("a") + " agent agent=alice name=alice", "only for role approver"},
		{"ApproverWithoutName", hash("a") + " approver", "needs name=<who>"},
		{"ApproverBadName", hash("a") + " approver name=a/b", `name "a/b"`},
		{"NotKeyValue", hash("a") + " agent agent=alice extra", `field "extra"`},
		{"TooManyFields", hash("a") + " worker types=a pool=p x=1 y=2", "got 6 fields"},
		{"KeyTwice", hash("a") + " worker pool=p pool=q", `field "pool=q"`},
		{"TypesOnAgent", hash("a") + " agent agent=alice types=noop", "only for role worker"},
		{"PoolOnAdmin", hash("a") + " admin pool=p", "only for role worker"},
		{"EmptyTypes", hash("a") + " worker types=", `"" is not a job type name`},
		{"BadType", hash("a") + " worker types=noop,Bad-Type", `"Bad-Type" is not a job type name`},
		{"TypeTwice", hash("a") + " worker types=noop,noop", "listed twice"},
		{"EmptyPool", hash("a") + " worker pool=", "pool= needs a pool id"},
		{"BadPool", hash("a") + " worker pool=a/b", `pool "a/b"`},
	}
	for _, c := range bad {
		t.Run("File"+c.name, func(t *testing.T) {
			t.Parallel()
			path := write(t, "# header\n"+hash("ok")+" admin\n"+c.line+"\n")
			_, err := LoadTokens(path, "")
			require.ErrorContains(t, err, path+":3:")
			require.ErrorContains(t, err, c.want)
		})
		t.Run("Env"+c.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadTokens("", hash("ok")+" admin;"+c.line)
			require.ErrorContains(t, err, TokensEnv+" record 2")
			require.ErrorContains(t, err, c.want)
		})
	}
	t.Run("Duplicate", func(t *testing.T) {
		t.Parallel()
		path := write(t, hash("a")+" admin\n")
		_, err := LoadTokens(path, hash("a")+" worker")
		require.ErrorContains(t, err, "configured twice")
	})
}
