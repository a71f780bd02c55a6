package db

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// latestVersion returns the highest migration version in dir of fsys. It panics on a malformed
// file name, a build defect caught by the package tests.
func latestVersion(fsys fs.FS, dir string) uint {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("db: read embedded migrations %s: %v", dir, err))
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

// newMigrate opens the embedded migrations in dir of fsys against drv (driver name dbName).
// On failure it closes drv, and with it the database handle.
func newMigrate(drv database.Driver, fsys fs.FS, dir, dbName string, logger *slog.Logger) (*migrate.Migrate, error) {
	src, err := iofs.New(fsys, dir)
	if err != nil {
		_ = drv.Close() // the open error is the one to report
		return nil, fmt.Errorf("migrate: open embedded migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, dbName, drv)
	if err != nil {
		_ = src.Close() // the open error is the one to report
		_ = drv.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	m.Log = migrateLogger{logger}
	return m, nil
}

// runMigrate runs cmd with m, then closes m. It returns the version before and after and
// whether the schema is dirty; "no change" is not an error. golang-migrate takes no context:
// a cancelled ctx asks it to stop after the current migration, and is then reported.
func runMigrate(ctx context.Context, m *migrate.Migrate, cmd string) (before, version uint, dirty bool, err error) {
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

	before, _, err = readVersion(m)
	if err != nil {
		return 0, 0, false, fmt.Errorf("migrate %s: %w", cmd, err)
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
		return before, version, dirty, fmt.Errorf("migrate %s: %w", cmd, err)
	}
	if verErr != nil {
		return before, 0, false, fmt.Errorf("migrate %s: %w", cmd, verErr)
	}
	if err := ctx.Err(); err != nil && cmd != CmdVersion {
		return before, version, dirty, fmt.Errorf("migrate %s: %w", cmd, err)
	}
	return before, version, dirty, nil
}
