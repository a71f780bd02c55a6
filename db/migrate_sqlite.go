package db

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
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
	entries, err := fs.ReadDir(SQLiteMigrations, SQLiteMigrationsDir)
	if err != nil {
		panic(fmt.Sprintf("db: read embedded sqlite migrations: %v", err))
	}
	var latest uint
	for _, e := range entries {
		m, err := source.DefaultParse(e.Name())
		if err != nil {
			panic(fmt.Sprintf("db: parse migration file name %q: %v", e.Name(), err))
		}
		latest = max(latest, m.Version)
	}
	return latest
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
		sqlDB.Close()
		return 0, false, fmt.Errorf("migrate: open database driver on %s: %w", path, err)
	}
	src, err := iofs.New(SQLiteMigrations, SQLiteMigrationsDir)
	if err != nil {
		drv.Close()
		return 0, false, fmt.Errorf("migrate: open embedded migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "sqlite", drv)
	if err != nil {
		src.Close()
		drv.Close()
		return 0, false, fmt.Errorf("migrate: %w", err)
	}
	m.Log = migrateLogger{logger}
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil {
			err = errors.Join(srcErr, dbErr)
		}
	}()
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()

	before, _, err := readVersion(m)
	if err != nil {
		return 0, false, fmt.Errorf("migrate %s: %w", cmd, err)
	}
	switch cmd {
	case CmdUp:
		err = m.Up()
	case CmdDown:
		err = m.Down()
	}
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	version, dirty, verErr := readVersion(m)
	if err != nil {
		return version, dirty, fmt.Errorf("migrate %s: %w", cmd, err)
	}
	if verErr != nil {
		return 0, false, fmt.Errorf("migrate %s: %w", cmd, verErr)
	}
	if err := ctx.Err(); err != nil && cmd != CmdVersion {
		return version, dirty, fmt.Errorf("migrate %s: %w", cmd, err)
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
