// Package testenv gives tests real, isolated backing services: a fresh, migrated MariaDB
// database per call and a unique Redis key prefix per call, both removed at cleanup.
//
// The servers come from ORCH_TEST_MYSQL_DSN (default root@tcp(127.0.0.1:3306)/) and
// ORCH_TEST_REDIS_ADDR (default 127.0.0.1:6379). A server that does not answer fails the test
// with a hint (`make services`); tests never skip silently.
//
// The package imports only store, store/mysql, db and go-redis, so every package's tests may
// use it.
package testenv

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/store"
	storemysql "github.com/gpuorch/orchestrator/store/mysql"
)

// Defaults of the environment variables that locate the test servers.
const (
	MySQLServerDSNDefault = "root@tcp(127.0.0.1:3306)/"
	RedisAddrDefault      = "127.0.0.1:6379"
)

// connectTimeout bounds the reachability checks and the setup/cleanup statements.
const connectTimeout = 10 * time.Second

const startHint = "start the test services with `make services` " +
	"(or point ORCH_TEST_MYSQL_DSN / ORCH_TEST_REDIS_ADDR at running ones)"

// MySQLServerDSN returns the DSN of the test MariaDB server (no database selected), from
// ORCH_TEST_MYSQL_DSN.
func MySQLServerDSN() string {
	return cmp.Or(os.Getenv("ORCH_TEST_MYSQL_DSN"), MySQLServerDSNDefault)
}

// MySQLEmptyDSN creates a fresh, empty database orch_t_<random> (no migrations applied),
// registers a cleanup that drops it, and returns a DSN for it with parseTime=true. Use it to
// test migrations themselves; most tests want MySQLDSN.
func MySQLEmptyDSN(t testing.TB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQLServerDSN())
	if err != nil {
		t.Fatalf("testenv: parse ORCH_TEST_MYSQL_DSN %q: %v", MySQLServerDSN(), err)
	}
	cfg.DBName = ""
	server, err := openMySQL(cfg)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer func() { _ = server.Close() }() // a probe connection; nothing to flush
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := server.PingContext(ctx); err != nil {
		t.Fatalf("testenv: MariaDB at %s is not reachable: %v; %s", cfg.Addr, err, startHint)
	}

	name := fmt.Sprintf("orch_t_%016x", rand.Uint64())
	q := "CREATE DATABASE " + db.QuoteIdent(name) + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	if _, err := server.ExecContext(ctx, q); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(t, cfg, name) })

	cfg.DBName = name
	cfg.ParseTime = true
	return cfg.FormatDSN()
}

// MySQLDSN creates a fresh database orch_t_<random> on the test server, applies every
// migration, registers a cleanup that drops it, and returns its DSN (with parseTime=true).
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn := MySQLEmptyDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, err := db.MigrateMySQL(ctx, dsn, db.CmdUp, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("testenv: migrate test database: %v", err)
	}
	return dsn
}

// MySQLStore returns a store.Store on a fresh, migrated database (see MySQLDSN); it is closed
// at cleanup, before the database is dropped.
func MySQLStore(t testing.TB) store.Store {
	t.Helper()
	dsn := MySQLDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	s, err := storemysql.Open(ctx, dsn, storemysql.Options{MaxOpenConns: 20})
	if err != nil {
		t.Fatalf("testenv: open mysql store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("testenv: close mysql store: %v", err)
		}
	})
	return s
}

func openMySQL(cfg *mysql.Config) (*sql.DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to MariaDB: %w", err)
	}
	return sql.OpenDB(connector), nil
}

func dropDatabase(t testing.TB, cfg *mysql.Config, name string) {
	server, err := openMySQL(cfg)
	if err != nil {
		t.Errorf("testenv: drop database %s: %v", name, err)
		return
	}
	defer func() { _ = server.Close() }() // a probe connection; nothing to flush
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if _, err := server.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db.QuoteIdent(name)); err != nil {
		t.Errorf("testenv: drop database %s: %v", name, err)
	}
}

// RedisAddr returns host:port of the test Redis (ORCH_TEST_REDIS_ADDR), failing the test when
// it does not answer PING.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := cmp.Or(os.Getenv("ORCH_TEST_REDIS_ADDR"), RedisAddrDefault)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }() // a probe connection; nothing to flush
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("testenv: Redis at %s is not reachable: %v; %s", addr, err, startHint)
	}
	return addr
}

// RedisPrefix returns a unique key prefix such as "t1f2e3d4c5b6a798:" and registers a cleanup
// that deletes every key starting with it (SCAN + UNLINK). Tests put all their keys under it so
// that they can share one Redis.
func RedisPrefix(t testing.TB) string {
	t.Helper()
	addr := RedisAddr(t)
	prefix := fmt.Sprintf("t%016x:", rand.Uint64())
	t.Cleanup(func() {
		if err := deleteKeys(addr, prefix); err != nil {
			t.Errorf("testenv: delete redis keys %s*: %v", prefix, err)
		}
	})
	return prefix
}

func deleteKeys(addr, prefix string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }() // a probe connection; nothing to flush
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	// The prefix is hex and ':' only, so it needs no glob escaping.
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return fmt.Errorf("unlink: %w", err)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
