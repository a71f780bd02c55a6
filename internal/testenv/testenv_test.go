package testenv_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

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

func TestProcessCPU(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Duration(-1), testenv.ProcessCPU(0))

	self := os.Getpid()
	before := testenv.ProcessCPU(self)
	require.GreaterOrEqual(t, before, time.Duration(0))
	// Burn CPU until the kernel's count (USER_HZ ticks) has moved.
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for testenv.ProcessCPU(self) == before && time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x ^= i
		}
	}
	require.Greater(t, testenv.ProcessCPU(self), before, "burned CPU %d", x)

	// The test server runs on this host here and in CI; elsewhere there is no pid to read.
	if pid := testenv.MySQLServerPID(t); pid > 0 {
		require.GreaterOrEqual(t, testenv.ProcessCPU(pid), time.Duration(0))
	}
}

// TestBusy: the spinners take CPU time while they run, and stop (this test's own CPU time stops
// growing with them) when stopped.
func TestBusy(t *testing.T) {
	t.Parallel()
	before := testenv.ProcessCPU(os.Getpid())
	stop := testenv.Busy(t, 2)
	require.Eventually(t, func() bool {
		return testenv.ProcessCPU(os.Getpid())-before >= 200*time.Millisecond
	}, time.Minute, 10*time.Millisecond, "the spinners used no CPU")
	stop()
	stop()                  // idempotent, and cleanup calls it again
	testenv.BusyFromEnv()() // started and stopped when ORCH_TEST_BUSY is set; a no-op otherwise
}
