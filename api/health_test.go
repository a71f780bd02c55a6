package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	b := setupDown(t)
	rec := b.request(t, http.MethodGet, "/healthz", "", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, wire.Health{Status: "ok"}, decode[wire.Health](t, rec))
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	st := testenv.MySQLStore(t)

	t.Run("AllUp", func(t *testing.T) {
		t.Parallel()
		rdb := streams.NewRedis(testenv.RedisAddr(t), "")
		t.Cleanup(func() { _ = rdb.Close() })
		b := newBundle(t, st, streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)}))
		rec := b.request(t, http.MethodGet, "/readyz", "", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, wire.Health{Status: "ok", Checks: map[string]string{
			CheckMySQL: "ok", CheckMigrations: "ok", CheckRedis: "ok",
		}}, decode[wire.Health](t, rec))
	})
	t.Run("RedisDown", func(t *testing.T) {
		t.Parallel()
		rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		b := newBundle(t, st, streams.New(rdb, streams.Options{}))
		rec := b.request(t, http.MethodGet, "/readyz", "", nil)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		h := decode[wire.Health](t, rec)
		require.Equal(t, "unavailable", h.Status)
		require.Equal(t, map[string]string{CheckMySQL: "ok", CheckMigrations: "ok", CheckRedis: "down"}, h.Checks)
	})
}

// schemaStore is a reachable database with a given migration state.
type schemaStore struct {
	store.Store
	version uint
	dirty   bool
}

func (schemaStore) Ping(context.Context) error { return nil }
func (s schemaStore) SchemaVersion(context.Context) (uint, bool, error) {
	return s.version, s.dirty, nil
}

func TestReadyzWithoutDatabase(t *testing.T) {
	t.Parallel()
	down := setupDown(t)

	t.Run("EverythingDown", func(t *testing.T) {
		t.Parallel()
		rec := down.request(t, http.MethodGet, "/readyz", "", nil)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		h := decode[wire.Health](t, rec)
		require.Equal(t, "down", h.Checks[CheckMySQL])
		require.Equal(t, "down", h.Checks[CheckRedis])
		require.Contains(t, h.Checks[CheckMigrations], "mysql is down")
	})
	for _, c := range []struct {
		name  string
		st    schemaStore
		check string
	}{
		{"Dirty", schemaStore{version: 4, dirty: true}, "dirty at version 4"},
		{"NotMigrated", schemaStore{}, "no migration applied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t, c.st, down.sc)
			rec := b.request(t, http.MethodGet, "/readyz", "", nil)
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
			h := decode[wire.Health](t, rec)
			require.Equal(t, "ok", h.Checks[CheckMySQL])
			require.Contains(t, h.Checks[CheckMigrations], c.check)
		})
	}
	t.Run("SQLiteNamed", func(t *testing.T) {
		// The embedded mode's database is named for what it is.
		t.Parallel()
		log := slog.New(slog.DiscardHandler)
		sb := newStack(schemaStore{version: 6}, down.sc, down.cfg, engine.Options{Logger: log})
		b := &bundle{srv: New(sb.with(Options{Logger: log, Database: CheckSQLite}))}
		rec := b.request(t, http.MethodGet, "/readyz", "", nil)
		h := decode[wire.Health](t, rec)
		require.Equal(t, map[string]string{CheckSQLite: "ok", CheckMigrations: "ok", CheckRedis: "down"}, h.Checks)

		b = &bundle{srv: New(down.with(Options{Logger: log, Database: CheckSQLite}))}
		rec = b.request(t, http.MethodGet, "/readyz", "", nil)
		require.Contains(t, decode[wire.Health](t, rec).Checks[CheckMigrations], "sqlite is down")
	})
	t.Run("Hook", func(t *testing.T) {
		t.Parallel()
		srv := New(Options{Engine: down.eng, Config: down.cfg, Logger: slog.New(slog.DiscardHandler),
			Ready: func(ctx context.Context) map[string]error {
				_, hasDeadline := ctx.Deadline()
				require.True(t, hasDeadline, "readiness checks are bounded")
				return map[string]error{"leader": nil, "gpu": errors.New("nvml: driver not loaded")}
			}})
		b := &bundle{srv: srv}
		rec := b.request(t, http.MethodGet, "/readyz", "", nil)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Equal(t, map[string]string{"leader": "ok", "gpu": "down"}, decode[wire.Health](t, rec).Checks)
	})
}
