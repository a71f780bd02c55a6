package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/wire"
)

// Readiness check names of /readyz.
const (
	CheckMySQL      = "mysql"
	CheckSQLite     = "sqlite" // the database check of the embedded mode
	CheckMigrations = "migrations"
	CheckRedis      = "redis"
)

// readyTimeout bounds all readiness checks together; a dependency slower than this is not ready.
const readyTimeout = 3 * time.Second

// CheckError is a readiness failure whose message is safe to show on the unauthenticated /readyz
// (other errors show as "down", their details go to the log).
type CheckError struct{ Reason string }

// Error implements error.
func (e *CheckError) Error() string { return e.Reason }

// healthz answers 200 while the process is up: it checks nothing else, so a database outage
// does not get the process restarted.
func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, wire.Health{Status: "ok"})
}

// readyz answers 200 when every dependency is usable, else 503 naming what is down.
func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
	defer cancel()
	results := s.ready(ctx)
	if s.admission != nil {
		results[CheckAdmission] = s.admissionReady()
	}
	h := wire.Health{Status: "ok", Checks: make(map[string]string, len(results))}
	for name, err := range results {
		var ce *CheckError
		switch {
		case err == nil:
			h.Checks[name] = "ok"
			continue
		case errors.As(err, &ce):
			h.Checks[name] = ce.Reason
		default:
			h.Checks[name] = "down"
		}
		h.Status = "unavailable"
		s.log.Warn("not ready", "check", name, "error", err)
	}
	status := http.StatusOK
	if h.Status != "ok" {
		status = http.StatusServiceUnavailable
	}
	c.JSON(status, h)
}

// checkDependencies is the default readiness check: the database (MariaDB, or SQLite in the
// embedded mode) answers and its schema is migrated (a version above zero, not dirty), and
// Redis answers. The checks run concurrently.
func (s *Server) checkDependencies(ctx context.Context) map[string]error {
	var (
		wg                  sync.WaitGroup
		dbErr, migrationErr error
		redisErr            error
	)
	wg.Go(func() {
		st := s.store
		if dbErr = st.Ping(ctx); dbErr != nil {
			migrationErr = &CheckError{Reason: "unknown: " + s.database + " is down"}
			return
		}
		migrationErr = checkSchema(st.SchemaVersion(ctx))
	})
	wg.Go(func() { redisErr = s.streams.Ping(ctx) })
	wg.Wait()
	return map[string]error{s.database: dbErr, CheckMigrations: migrationErr, CheckRedis: redisErr}
}

// checkSchema judges the result of Store.SchemaVersion.
func checkSchema(version uint, dirty bool, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("read schema version: %w", err)
	case dirty:
		return &CheckError{Reason: fmt.Sprintf("dirty at version %d: a migration failed halfway; fix it and run `orchestrator migrate`", version)}
	case version == 0:
		return &CheckError{Reason: "no migration applied: run `orchestrator migrate`"}
	}
	return nil
}
