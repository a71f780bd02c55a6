package sqlgen

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds what the drivers share in reading their errors and golang-migrate's table.

// MapErr translates a driver's error into the store's sentinels, keeping the original in the
// chain for logs: no row is store.ErrNotFound, a taken unique key (duplicate reports it, in the
// driver's terms) store.ErrConflict, and any other error what unavailable makes of it.
func MapErr(err error, duplicate func(error) bool, unavailable func(error) error) error {
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case err != nil && duplicate(err):
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return unavailable(err)
}

// SchemaVersion returns the version golang-migrate recorded in schema_migrations: 0, false
// when no migration ever ran, which is no row, or an error that missing reports (no such
// table, in the driver's terms).
func SchemaVersion(ctx context.Context, db *sql.DB, missing func(error) bool) (uint, bool, error) {
	var (
		version int64
		dirty   bool
	)
	err := db.QueryRowContext(ctx, "SELECT version, dirty FROM schema_migrations LIMIT 1").Scan(&version, &dirty)
	switch {
	case errors.Is(err, sql.ErrNoRows), err != nil && missing(err):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("read schema version: %w", err)
	case version < 0: // golang-migrate's NilVersion (-1) after a failed first down
		return 0, dirty, nil
	}
	return uint(version), dirty, nil
}
