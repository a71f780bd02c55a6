package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/mysql"
	"github.com/gpuorch/orchestrator/streams"
)

// backends are what the server runs on: the store and the Redis client. serve opens MariaDB
// and the configured Redis (openBackends); the embedded mode opens SQLite and an in-process
// Redis (openEmbedded) and replaces the first by passing serverOptions.open.
type backends struct {
	store store.Store
	redis redis.UniversalClient
	// elector is set when opening the backends already elected this process: the embedded
	// mode's LocalElector, whose file lock on the data directory is what keeps a second
	// orchestrator off the SQLite file, so it must be taken before anything else starts.
	// Leader-only work must then run under it, installed with setLeaderWork. nil: serve
	// elects among its peers itself.
	elector leader.Elector
	// setLeaderWork installs the leader-only work (leader.Config.OnElected) of elector, which
	// was started before the work could be built; it runs for the current term at once and
	// for every later one. nil when elector is nil.
	setLeaderWork func(work func(ctx context.Context, term int64))
	// describe names the backends for the logs and the banner.
	describe string
	// database is the name of /readyz's database check (api.CheckMySQL, api.CheckSQLite).
	database string
	// close releases everything, in reverse order of opening.
	close func()
}

// openBackends opens serve's backends: MariaDB, migrated at start (waiting for it to come
// up), and the configured Redis (connected lazily: Redis being down is not fatal).
func openBackends(ctx context.Context, cfg *config.Config, log *slog.Logger) (*backends, error) {
	if err := migrateAtStart(ctx, cfg, log); err != nil {
		return nil, err
	}
	st, err := mysql.Open(ctx, cfg.MySQLDSN, mysql.Options{})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	rdb := streams.NewRedis(cfg.RedisAddr, cfg.RedisPassword)
	return &backends{
		store:    st,
		redis:    rdb,
		describe: "MariaDB " + redactDSN(cfg.MySQLDSN) + " (transactions " + st.Isolation() + "), Redis " + cfg.RedisAddr,
		database: api.CheckMySQL,
		close: func() {
			_ = rdb.Close()
			_ = st.Close()
		},
	}, nil
}

// redactDSN hides a password in a DSN before it is printed.
func redactDSN(dsn string) string {
	at := -1
	for i := len(dsn) - 1; i >= 0; i-- {
		if dsn[i] == '@' {
			at = i
			break
		}
	}
	if at < 0 {
		return dsn
	}
	for i := 0; i < at; i++ {
		if dsn[i] == ':' {
			return dsn[:i] + ":****" + dsn[at:]
		}
	}
	return dsn
}
