package db_test

import (
	"context"
	"database/sql"
	"io/fs"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/internal/testenv"
)

func TestLatestMySQLVersion(t *testing.T) {
	t.Parallel()

	entries, err := fs.ReadDir(db.MySQLMigrations, db.MySQLMigrationsDir)
	require.NoError(t, err)
	ups, downs := 0, 0
	for _, e := range entries {
		switch {
		case strings.HasSuffix(e.Name(), ".up.sql"):
			ups++
		case strings.HasSuffix(e.Name(), ".down.sql"):
			downs++
		}
	}
	require.Positive(t, ups)
	require.Equal(t, ups, downs, "every migration has an up and a down file")
	require.GreaterOrEqual(t, db.LatestMySQLVersion(), uint(1))
}

func TestMigrateMySQL(t *testing.T) {
	t.Parallel()

	t.Run("UpVersionDownUp", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.MySQLEmptyDSN(t)
		ctx := t.Context()
		latest := db.LatestMySQLVersion()

		v, dirty, err := db.MigrateMySQL(ctx, dsn, db.CmdVersion, nil)
		require.NoError(t, err)
		require.Zero(t, v)
		require.False(t, dirty)

		v, dirty, err = db.MigrateMySQL(ctx, dsn, db.CmdUp, slog.Default())
		require.NoError(t, err)
		require.Equal(t, latest, v)
		require.False(t, dirty)
		require.Equal(t, createdTables(t), tables(t, dsn))
		// 007 dropped the JSON checks of the job's payload and result, which MariaDB ran on
		// every UPDATE of a job; 014 the audit rows' (three or four inserts a job).
		require.Empty(t, checkConstraints(t, dsn, "orchestrator_jobs"))
		require.Empty(t, checkConstraints(t, dsn, "orchestrator_audit"))

		// Up again: no change is not an error.
		v, _, err = db.MigrateMySQL(ctx, dsn, db.CmdUp, nil)
		require.NoError(t, err)
		require.Equal(t, latest, v)

		v, dirty, err = db.MigrateMySQL(ctx, dsn, db.CmdVersion, nil)
		require.NoError(t, err)
		require.Equal(t, latest, v)
		require.False(t, dirty)

		v, dirty, err = db.MigrateMySQL(ctx, dsn, db.CmdDown, nil)
		require.NoError(t, err)
		require.Zero(t, v)
		require.False(t, dirty)
		require.Equal(t, []string{"schema_migrations"}, tables(t, dsn))

		v, _, err = db.MigrateMySQL(ctx, dsn, db.CmdUp, nil)
		require.NoError(t, err)
		require.Equal(t, latest, v)
	})

	t.Run("ConcurrentUp", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.MySQLEmptyDSN(t)
		const n = 4
		var (
			wg       sync.WaitGroup
			versions [n]uint
			errs     [n]error
		)
		for i := range n {
			wg.Go(func() {
				versions[i], _, errs[i] = db.MigrateMySQL(context.Background(), dsn, db.CmdUp, nil)
			})
		}
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, db.LatestMySQLVersion(), versions[i])
		}
		v, dirty, err := db.MigrateMySQL(t.Context(), dsn, db.CmdVersion, nil)
		require.NoError(t, err)
		require.Equal(t, db.LatestMySQLVersion(), v)
		require.False(t, dirty)
	})

	t.Run("WaitsForLock", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.MySQLEmptyDSN(t)
		cfg, err := mysql.ParseDSN(dsn)
		require.NoError(t, err)
		lockID, err := database.GenerateAdvisoryLockId(cfg.DBName + ":" + db.MigrationsTable)
		require.NoError(t, err)

		// Hold golang-migrate's lock on a pinned connection, as another orchestrator would.
		sqlDB, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		defer sqlDB.Close()
		holder, err := sqlDB.Conn(t.Context())
		require.NoError(t, err)
		defer holder.Close()
		var got bool
		require.NoError(t, holder.QueryRowContext(t.Context(), "SELECT GET_LOCK(?, 0)", lockID).Scan(&got))
		require.True(t, got)

		type result struct {
			version uint
			err     error
		}
		done := make(chan result, 1)
		go func() {
			v, _, err := db.MigrateMySQL(context.Background(), dsn, db.CmdUp, nil)
			done <- result{v, err}
		}()

		// Wait until the migrator is blocked in GET_LOCK; it must not have touched the schema.
		require.Eventually(t, func() bool {
			var n int
			err := sqlDB.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.processlist
				WHERE db = ? AND info LIKE 'SELECT GET_LOCK(%'`, cfg.DBName).Scan(&n)
			return err == nil && n > 0
		}, 5*time.Second, 5*time.Millisecond)
		require.Empty(t, tables(t, dsn))

		_, err = holder.ExecContext(t.Context(), "SELECT RELEASE_LOCK(?)", lockID)
		require.NoError(t, err)
		select {
		case r := <-done:
			require.NoError(t, r.err)
			require.Equal(t, db.LatestMySQLVersion(), r.version)
		case <-time.After(30 * time.Second):
			t.Fatal("migrate up did not finish after the lock was released")
		}
	})

	t.Run("UnknownCommand", func(t *testing.T) {
		t.Parallel()
		_, _, err := db.MigrateMySQL(t.Context(), "root@tcp(127.0.0.1:3306)/x", "sideways", nil)
		require.ErrorContains(t, err, "unknown command")
	})

	t.Run("NoDatabaseName", func(t *testing.T) {
		t.Parallel()
		_, _, err := db.MigrateMySQL(t.Context(), "root@tcp(127.0.0.1:3306)/", db.CmdUp, nil)
		require.ErrorContains(t, err, "names no database")
	})
}

func TestEnsureDatabase(t *testing.T) {
	t.Parallel()

	// A fresh name on the test server: drop the empty database testenv made, then let
	// EnsureDatabase recreate it (twice: it is idempotent). testenv drops it at cleanup.
	dsn := testenv.MySQLEmptyDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	name := cfg.DBName
	cfg.DBName = ""
	server, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	defer server.Close()
	_, err = server.ExecContext(t.Context(), "DROP DATABASE "+db.QuoteIdent(name))
	require.NoError(t, err)

	require.NoError(t, db.EnsureDatabase(t.Context(), dsn))
	require.NoError(t, db.EnsureDatabase(t.Context(), dsn))
	v, _, err := db.MigrateMySQL(t.Context(), dsn, db.CmdUp, nil)
	require.NoError(t, err)
	require.Equal(t, db.LatestMySQLVersion(), v)

	require.ErrorContains(t, db.EnsureDatabase(t.Context(), "root@tcp(127.0.0.1:3306)/"), "names no database")
}

func tables(t *testing.T, dsn string) []string {
	t.Helper()
	return queryStrings(t, dsn, "SHOW TABLES")
}

// checkConstraints lists the names of the CHECK constraints of table, sorted.
func checkConstraints(t *testing.T, dsn, table string) []string {
	t.Helper()
	return queryStrings(t, dsn, `SELECT CONSTRAINT_NAME FROM information_schema.CHECK_CONSTRAINTS
		WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY CONSTRAINT_NAME`, table)
}

// queryStrings runs q against dsn and returns the first column of every row.
func queryStrings(t *testing.T, dsn, q string, args ...any) []string {
	t.Helper()
	conn, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	defer conn.Close()
	rows, err := conn.QueryContext(t.Context(), q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	return names
}

// createdTables lists the tables the up migrations create, plus golang-migrate's own, sorted:
// what a fully migrated database must hold (no more, no less).
func createdTables(t *testing.T) []string {
	t.Helper()
	re := regexp.MustCompile("(?i)CREATE TABLE (?:IF NOT EXISTS )?`?([a-z_0-9]+)`?")
	names := []string{db.MigrationsTable}
	entries, err := fs.Glob(db.MySQLMigrations, db.MySQLMigrationsDir+"/*.up.sql")
	require.NoError(t, err)
	for _, e := range entries {
		raw, err := fs.ReadFile(db.MySQLMigrations, e)
		require.NoError(t, err)
		for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
			names = append(names, m[1])
		}
	}
	sort.Strings(names)
	return names
}
