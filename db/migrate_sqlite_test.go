package db_test

import (
	"database/sql"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/golang-migrate/migrate/v4/source"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/db"
)

// migrationFiles returns the file names of an embedded migrations directory.
func migrationFiles(t *testing.T, fsys fs.FS, dir string) []string {
	t.Helper()
	entries, err := fs.ReadDir(fsys, dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		_, err := source.DefaultParse(e.Name())
		require.NoError(t, err, "migration file name %s", e.Name())
		names = append(names, e.Name())
	}
	return names
}

func TestSQLiteMirrorsMySQL(t *testing.T) {
	t.Parallel()
	// Same version numbers and names, up and down: a database of either driver at version N
	// has the same schema.
	mysqlFiles := migrationFiles(t, db.MySQLMigrations, db.MySQLMigrationsDir)
	sqliteFiles := migrationFiles(t, db.SQLiteMigrations, db.SQLiteMigrationsDir)
	require.Equal(t, mysqlFiles, sqliteFiles, "db/migrations/sqlite must mirror db/migrations/mysql")
	require.Equal(t, db.LatestMySQLVersion(), db.LatestSQLiteVersion())
}

// sqliteTables lists the tables of the database file at path.
func sqliteTables(t *testing.T, path string) []string {
	t.Helper()
	raw, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer raw.Close()
	rows, err := raw.QueryContext(t.Context(),
		"SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
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

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()

	t.Run("UpVersionDownUp", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "data", "orchestrator.db") // the directory is created
		ctx := t.Context()
		latest := db.LatestSQLiteVersion()

		v, dirty, err := db.MigrateSQLite(ctx, path, db.CmdVersion, nil)
		require.NoError(t, err)
		require.Zero(t, v)
		require.False(t, dirty)

		v, dirty, err = db.MigrateSQLite(ctx, path, db.CmdUp, nil)
		require.NoError(t, err)
		require.Equal(t, latest, v)
		require.False(t, dirty)
		tables := sqliteTables(t, path)
		require.Subset(t, tables, []string{"orchestrator_audit", "orchestrator_jobs", "leader_state", "schema_migrations"})

		v, _, err = db.MigrateSQLite(ctx, path, db.CmdUp, nil)
		require.NoError(t, err, "no change is not an error")
		require.Equal(t, latest, v)

		v, dirty, err = db.MigrateSQLite(ctx, path, db.CmdDown, nil)
		require.NoError(t, err)
		require.Zero(t, v)
		require.False(t, dirty)
		require.Equal(t, []string{"schema_migrations"}, sqliteTables(t, path))

		v, _, err = db.MigrateSQLite(ctx, path, db.CmdUp, nil)
		require.NoError(t, err)
		require.Equal(t, latest, v)
		require.Equal(t, tables, sqliteTables(t, path))
	})

	t.Run("ConcurrentUp", func(t *testing.T) {
		t.Parallel()
		// Orchestrators starting at once on one file take turns (the sidecar flock): one
		// applies the migrations, the others find nothing to do, and nothing is dirty.
		path := filepath.Join(t.TempDir(), "orchestrator.db")
		const n = 6
		var (
			wg       sync.WaitGroup
			versions [n]uint
			dirties  [n]bool
			errs     [n]error
		)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				versions[i], dirties[i], errs[i] = db.MigrateSQLite(t.Context(), path, db.CmdUp, nil)
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, db.LatestSQLiteVersion(), versions[i])
			require.False(t, dirties[i])
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		_, _, err := db.MigrateSQLite(t.Context(), filepath.Join(t.TempDir(), "x.db"), "sideways", nil)
		require.ErrorContains(t, err, "unknown command")
		_, _, err = db.MigrateSQLite(t.Context(), "x.db?mode=ro", db.CmdUp, nil)
		require.ErrorContains(t, err, "without '?'")
		_, _, err = db.MigrateSQLite(t.Context(), "", db.CmdUp, nil)
		require.Error(t, err)
	})

	t.Run("EveryMigrationHasADown", func(t *testing.T) {
		t.Parallel()
		files := migrationFiles(t, db.SQLiteMigrations, db.SQLiteMigrationsDir)
		for _, f := range files {
			if up, ok := strings.CutSuffix(f, ".up.sql"); ok {
				require.True(t, slices.Contains(files, up+".down.sql"), "%s has no down file", f)
			}
		}
	})
}
