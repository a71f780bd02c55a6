package db

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
)

// SQLiteMigrations holds the SQLite migrations of the embedded mode
// (migrations/sqlite/NNN_name.{up,down}.sql). They mirror the MariaDB ones: the same version
// numbers, the same tables and columns, so that a database of either driver at version N has
// the same schema.
//
//go:embed migrations/sqlite/*.sql
var SQLiteMigrations embed.FS

// SQLiteMigrationsDir is the directory of SQLiteMigrations that holds the files.
const SQLiteMigrationsDir = "migrations/sqlite"

// sqliteBusyTimeout is how long a migration statement waits for another connection's write
// lock (the orchestrator's own store, or an operator's sqlite3 shell) before failing.
const sqliteBusyTimeout = 10 * time.Second

// LatestSQLiteVersion returns the highest SQLite migration version embedded in the binary.
// It panics on a malformed file name, a build defect caught by the package tests.
func LatestSQLiteVersion() uint {
	return latestVersion(SQLiteMigrations, SQLiteMigrationsDir)
}

// MigrateSQLite runs cmd (CmdUp, CmdDown or CmdVersion) against the SQLite database file at
// path (created, with its directory, when missing) and returns the version applied afterwards
// and whether it is dirty. "No change" is not an error.
//
// golang-migrate's SQLite driver only locks within one process, so two orchestrators starting
// on the same file could both apply migration 1 and leave the schema dirty. MigrateSQLite
// therefore holds an exclusive flock on a sidecar file (path + ".migrate-lock") while it runs:
// concurrent runs take turns, and the later ones find nothing to do, as with MariaDB's
// GET_LOCK. The kernel drops the lock when a process dies, so a crash leaves no stale lock.
func MigrateSQLite(ctx context.Context, path, cmd string, logger *slog.Logger) (version uint, dirty bool, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	switch cmd {
	case CmdUp, CmdDown, CmdVersion:
	default:
		return 0, false, fmt.Errorf("migrate: unknown command %q: want up, down or version", cmd)
	}
	if path == "" || strings.ContainsRune(path, '?') {
		return 0, false, fmt.Errorf("migrate: sqlite database path %q: want a file name without '?'", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return 0, false, fmt.Errorf("migrate: create database directory: %w", err)
	}
	unlock, err := lockFile(ctx, path+".migrate-lock")
	if err != nil {
		return 0, false, fmt.Errorf("migrate %s: %w", cmd, err)
	}
	defer unlock()
	return migrateSQLiteLocked(ctx, path, cmd, logger)
}

func migrateSQLiteLocked(ctx context.Context, path, cmd string, logger *slog.Logger) (version uint, dirty bool, err error) {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Set("_txlock", "immediate")
	sqlDB, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return 0, false, fmt.Errorf("migrate: open %s: %w", path, err)
	}
	sqlDB.SetMaxOpenConns(1) // one connection: the migration and the version row never race
	drv, err := migratesqlite.WithInstance(sqlDB, &migratesqlite.Config{MigrationsTable: MigrationsTable})
	if err != nil {
		_ = sqlDB.Close() // the open error is the one to report
		return 0, false, fmt.Errorf("migrate: open database driver on %s: %w", path, err)
	}
	m, err := newMigrate(drv, SQLiteMigrations, SQLiteMigrationsDir, "sqlite", logger)
	if err != nil {
		return 0, false, err
	}
	before, version, dirty, err := runMigrate(ctx, m, cmd)
	if err != nil {
		return version, dirty, err
	}
	logger.Info("migrate: "+cmd, "database", path, "from_version", before,
		"version", version, "dirty", dirty, "latest", LatestSQLiteVersion())
	return version, dirty, nil
}

// lockFileRetry is how often lockFile tries again while another process holds the lock.
const lockFileRetry = 50 * time.Millisecond

// lockFile takes an exclusive flock on path (created when missing), waiting while another
// process holds it, until ctx ends or lockWaitMax passes. The returned function unlocks.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	deadline := time.Now().Add(lockWaitMax)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		t := time.NewTimer(lockFileRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
}
