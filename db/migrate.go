// Package db owns the database schema: the SQL migrations, embedded into the binary, and the
// functions that apply them with golang-migrate (`orchestrator migrate up|down|version`, and the
// test environment).
package db

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
)

// MySQLMigrations holds the MariaDB migrations (migrations/mysql/NNN_name.{up,down}.sql).
//
//go:embed migrations/mysql/*.sql
var MySQLMigrations embed.FS

// MySQLMigrationsDir is the directory of MySQLMigrations that holds the files.
const MySQLMigrationsDir = "migrations/mysql"

// Migration commands accepted by MigrateMySQL.
const (
	CmdUp      = "up"      // apply every pending migration
	CmdDown    = "down"    // revert every applied migration (drops the schema)
	CmdVersion = "version" // only report the applied version
)

// MigrationsTable is the table golang-migrate records the applied version in.
const MigrationsTable = "schema_migrations"

// lockWaitMax bounds how long MigrateMySQL keeps retrying while another process holds the
// migration lock. golang-migrate itself waits 10 s per GET_LOCK attempt.
const lockWaitMax = 2 * time.Minute

// LatestMySQLVersion returns the highest migration version embedded in the binary: the version
// a fully migrated database reports. It panics on a malformed file name, which is a build
// defect caught by the package tests.
func LatestMySQLVersion() uint {
	return latestVersion(MySQLMigrations, MySQLMigrationsDir)
}

// EnsureDatabase creates the database named by dsn when it does not exist yet, connecting to
// the server without selecting a database, so that `orchestrator migrate up` works on a fresh
// server.
func EnsureDatabase(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("ensure database: parse dsn: %w", err)
	}
	name := cfg.DBName
	if name == "" {
		return errors.New("ensure database: the dsn names no database")
	}
	cfg.DBName = ""
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("ensure database: %w", err)
	}
	sqlDB := sql.OpenDB(conn)
	defer func() { _ = sqlDB.Close() }() // nothing written through it is left unflushed
	q := "CREATE DATABASE IF NOT EXISTS " + QuoteIdent(name) +
		" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	if _, err := sqlDB.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("ensure database %s: %w", name, err)
	}
	return nil
}

// QuoteIdent quotes a MySQL identifier (database or table name) with backticks.
func QuoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// MigrateMySQL runs cmd (CmdUp, CmdDown or CmdVersion) against the database of dsn and returns
// the version applied afterwards (0 when none) and whether it is dirty (a migration failed half
// way; an operator must repair it and force the version).
//
// golang-migrate serialises concurrent runs with GET_LOCK, so orchestrators starting at once
// are safe: the losers wait, then find nothing to do. "No change" is not an error.
func MigrateMySQL(ctx context.Context, dsn string, cmd string, logger *slog.Logger) (version uint, dirty bool, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	switch cmd {
	case CmdUp, CmdDown, CmdVersion:
	default:
		return 0, false, fmt.Errorf("migrate: unknown command %q: want up, down or version", cmd)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return 0, false, fmt.Errorf("migrate: parse dsn: %w", err)
	}
	if cfg.DBName == "" {
		return 0, false, errors.New("migrate: the dsn names no database")
	}
	cfg.MultiStatements = true // a migration file holds several statements
	cfg.InterpolateParams = false

	deadline := time.Now().Add(lockWaitMax)
	for attempt := 1; ; attempt++ {
		version, dirty, err = migrateOnce(ctx, cfg, cmd, logger)
		if !errors.Is(err, database.ErrLocked) || time.Now().After(deadline) {
			return version, dirty, err
		}
		// Another process held the lock for longer than golang-migrate waits: wait and retry.
		logger.Info("migrate: schema is locked by another process, retrying", "attempt", attempt)
		wait := time.Duration(200+rand.IntN(300)) * time.Millisecond
		select {
		case <-ctx.Done():
			return 0, false, fmt.Errorf("migrate %s: %w", cmd, ctx.Err())
		case <-time.After(wait):
		}
	}
}

func migrateOnce(ctx context.Context, cfg *mysql.Config, cmd string, logger *slog.Logger) (version uint, dirty bool, err error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return 0, false, fmt.Errorf("migrate: %w", err)
	}
	sqlDB := sql.OpenDB(connector)
	sqlDB.SetMaxOpenConns(2)
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close() // the connect error is the one to report
		return 0, false, fmt.Errorf("migrate: connect to %s: %w", cfg.Addr, err)
	}
	drv, err := migratemysql.WithInstance(sqlDB, &migratemysql.Config{
		DatabaseName:    cfg.DBName,
		MigrationsTable: MigrationsTable,
	})
	if err != nil {
		_ = sqlDB.Close() // the open error is the one to report
		return 0, false, fmt.Errorf("migrate: open database driver: %w", err)
	}
	m, err := newMigrate(drv, MySQLMigrations, MySQLMigrationsDir, "mysql", logger)
	if err != nil {
		return 0, false, err
	}
	before, version, dirty, err := runMigrate(ctx, m, cmd)
	if err != nil {
		return version, dirty, err
	}
	logger.Info("migrate: "+cmd, "database", cfg.DBName, "from_version", before,
		"version", version, "dirty", dirty, "latest", LatestMySQLVersion())
	return version, dirty, nil
}

func readVersion(m *migrate.Migrate) (uint, bool, error) {
	v, dirty, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	return v, dirty, nil
}

// migrateLogger adapts slog to golang-migrate's logger (its lines are debug detail).
type migrateLogger struct{ l *slog.Logger }

func (g migrateLogger) Printf(format string, v ...any) {
	g.l.Debug("migrate: " + strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (g migrateLogger) Verbose() bool { return g.l.Enabled(context.Background(), slog.LevelDebug) }
