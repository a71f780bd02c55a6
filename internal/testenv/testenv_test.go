package testenv_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/internal/testenv"
)

func TestMySQLDSN(t *testing.T) {
	t.Parallel()

	var name string
	t.Run("Migrated", func(t *testing.T) {
		dsn := testenv.MySQLDSN(t)
		cfg, err := mysql.ParseDSN(dsn)
		require.NoError(t, err)
		require.True(t, cfg.ParseTime)
		require.Regexp(t, `^orch_t_[0-9a-f]{16}$`, cfg.DBName)
		name = cfg.DBName

		s := testenv.MySQLStore(t)
		v, dirty, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.False(t, dirty)
		require.Equal(t, db.LatestMySQLVersion(), v)
	})

	// The subtest's cleanup dropped its database.
	server, err := sql.Open("mysql", testenv.MySQLServerDSN())
	require.NoError(t, err)
	defer server.Close()
	var n int
	require.NoError(t, server.QueryRowContext(t.Context(),
		"SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n))
	require.Zero(t, n)
}

func TestRedisPrefix(t *testing.T) {
	t.Parallel()

	addr := testenv.RedisAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()

	var prefix string
	t.Run("Keys", func(t *testing.T) {
		prefix = testenv.RedisPrefix(t)
		require.Regexp(t, `^t[0-9a-f]{16}:$`, prefix)
		for _, k := range []string{"a", "b", "stream:x"} {
			require.NoError(t, rdb.Set(ctx, prefix+k, "1", 0).Err())
		}
	})

	var keys []string
	it := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	require.NoError(t, it.Err())
	require.Empty(t, keys)
}
