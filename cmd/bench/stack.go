package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/store/sqlite" // the embedded mode's database file, and its driver
)

// Time limits of the stack's life cycle.
const (
	readyWait    = 60 * time.Second // orchestrator up and migrated
	workerWait   = 30 * time.Second // worker logged "worker started"
	stopGrace    = 15 * time.Second // SIGTERM → SIGKILL
	setupTimeout = 30 * time.Second // database and Redis statements of setup and cleanup
)

// stack is what the bench measures: either processes it started itself (a fresh database, a
// Redis key prefix, an orchestrator and workers) or an external orchestrator (-api-url), to
// which it may still add its own workers.
type stack struct {
	o    *options
	dir  string // config, tokens, logs, profiles
	info StackInfo
	api  *client.Client
	// db is the orchestrator's database; the bench reads job rows from it to measure.
	db *sql.DB

	orch       *process
	workerBin  string
	workerEnv  []string
	workers    []*process
	generation int // worker start count, so every start logs to new files

	serverCfg *mysql.Config // the MariaDB server, for dropping dbName
	dbName    string        // the database the bench created ("" for an external or embedded stack)
	prefix    string        // the Redis prefix the bench owns ("" for an external or embedded stack)
	// redisAddr is the Redis of the orchestrator: -redis-addr, or the embedded mode's own.
	redisAddr string
	// sqlitePath is the embedded mode's database file ("" otherwise).
	sqlitePath string
}

// owned reports whether the bench started the orchestrator (and may change its policies).
func (s *stack) owned() bool { return s.info.Mode != "external" }

// newStack prepares the stack of o. With its own stack it creates the database and tokens and
// starts the orchestrator; workers are started by the scenarios (startWorkers). On error the
// part already set up is torn down.
func newStack(ctx context.Context, o *options, hc *http.Client) (_ *stack, err error) {
	dir, err := os.MkdirTemp("", "orch-bench-")
	if err != nil {
		return nil, fmt.Errorf("set up stack: %w", err)
	}
	s := &stack{o: o, dir: dir}
	s.info = StackInfo{Workers: o.workers, Concurrency: o.concurrency}
	if o.keep {
		s.info.LogDir = dir
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if o.apiURL != "" {
		err = s.external(o, hc)
	} else {
		err = s.own(ctx, o, hc)
	}
	if err != nil {
		return nil, err
	}
	if o.noWorkers {
		s.info.Workers = 0
	}
	return s, nil
}

// own creates the database, tokens and config of a private stack and starts its orchestrator:
// on a fresh database of the MariaDB server and a Redis key prefix, or with -embedded in the
// embedded mode (SQLite in the stack's directory, Redis in the orchestrator's process).
func (s *stack) own(ctx context.Context, o *options, hc *http.Client) error {
	orchBin, workerBin, err := binaries(ctx, o.binDir, s.dir)
	if err != nil {
		return err
	}
	s.workerBin = workerBin
	suffix := randomHex(6)
	var backends []string // the backends' settings, for the orchestrator and the workers
	var serve []string    // the orchestrator's command line
	var dsn string
	if o.embedded {
		s.info.Mode = "embedded"
		if s.redisAddr, err = freeAddr(); err != nil {
			return err
		}
		dataDir := filepath.Join(s.dir, "data")
		s.sqlitePath = filepath.Join(dataDir, sqlite.DBFileName)
		s.info.Database = s.sqlitePath
		backends = []string{"ORCH_DATA_DIR=" + dataDir, "ORCH_EMBEDDED_REDIS_ADDR=" + s.redisAddr,
			"ORCH_REDIS_ADDR=" + s.redisAddr}
		serve = []string{"serve", "--embedded"}
	} else {
		s.info.Mode = "own"
		if dsn, err = s.createDatabase(ctx, o, suffix); err != nil {
			return err
		}
		s.redisAddr, s.prefix = o.redisAddr, "bench"+suffix+":"
		s.info.RedisPrefix = s.prefix
		backends = []string{"ORCH_MYSQL_DSN=" + dsn, "ORCH_REDIS_ADDR=" + o.redisAddr, "ORCH_REDIS_PREFIX=" + s.prefix}
		serve = []string{"serve"}
	}

	admin, adminLine, err := api.GenerateToken("admin", "")
	if err != nil {
		return err
	}
	wtok, workerLine, err := api.GenerateToken("worker", "")
	if err != nil {
		return err
	}
	tokens := filepath.Join(s.dir, "tokens")
	if err := os.WriteFile(tokens, []byte(adminLine+"\n"+workerLine+"\n"), 0o600); err != nil {
		return fmt.Errorf("write tokens file: %w", err)
	}
	cfgPath := filepath.Join(s.dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(stackConfig(o, true)), 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	apiURL := "http://" + addr
	s.info.APIURL = apiURL
	common := slices.Concat([]string{
		"ORCH_CONFIG=" + cfgPath, "ORCH_HTTP_ADDR=" + addr, "ORCH_API_URL=" + apiURL,
		"ORCH_LOG_LEVEL=info", "ORCH_LOG_FORMAT=json",
	}, backends, runtimeEnv(o))
	s.workerEnv = slices.Concat(common, []string{"ORCH_API_TOKEN=" + wtok})
	s.api = newClient(apiURL, admin, hc)
	// The orchestrator's node has simulated GPUs for the leases scenario, on a node of its
	// own: the workers keep the host's node and report its GPUs (none without NVML), which
	// then cannot overwrite the simulated ones.
	s.info.GPUNode, s.info.SimGPUs = "bench-"+suffix, benchSimGPUs
	if o.embedded {
		progress("stack: starting orchestrator on %s (embedded mode: SQLite %s, redis %s, node %s with GPUs %s)",
			addr, s.sqlitePath, s.redisAddr, s.info.GPUNode, s.info.SimGPUs)
	} else {
		progress("stack: starting orchestrator on %s (database %s, redis prefix %s, node %s with GPUs %s)",
			addr, s.dbName, s.prefix, s.info.GPUNode, s.info.SimGPUs)
	}
	s.orch, err = startProcess(s.dir, "orchestrator", orchBin, slices.Concat(common, []string{
		"ORCH_TOKENS_FILE=" + tokens, "ORCH_NODE_ID=" + s.info.GPUNode,
		"ORCH_SIM_GPUS=" + benchSimGPUs, "ORCH_NVML_DISABLE=1",
	}), serve...)
	if err != nil {
		return err
	}
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	// The embedded orchestrator creates its database file at start.
	if o.embedded {
		s.db, err = openSQLite(s.sqlitePath)
	} else {
		s.db, err = openDB(dsn)
	}
	return err
}

// createDatabase creates the stack's database orch_bench_<suffix> on the MariaDB server of
// -mysql-dsn and returns its DSN.
func (s *stack) createDatabase(ctx context.Context, o *options, suffix string) (string, error) {
	cfg, err := mysql.ParseDSN(o.mysqlDSN)
	if err != nil {
		return "", fmt.Errorf("parse -mysql-dsn: %w", err)
	}
	cfg.DBName = ""
	s.serverCfg = cfg.Clone()
	name := "orch_bench_" + suffix
	if err := execServer(ctx, s.serverCfg, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	s.dbName, s.info.Database = name, name
	cfg.DBName, cfg.ParseTime = name, true
	return cfg.FormatDSN(), nil
}

// external points the stack at a running orchestrator; workers it starts use the flags'
// Redis address and prefix and the worker token.
func (s *stack) external(o *options, hc *http.Client) error {
	s.info.Mode, s.info.APIURL, s.info.RedisPrefix = "external", o.apiURL, o.redisPrefix
	s.redisAddr = o.redisAddr
	cfg, err := mysql.ParseDSN(o.mysqlDSN)
	if err != nil {
		return fmt.Errorf("parse -mysql-dsn: %w", err)
	}
	if cfg.DBName == "" {
		return errors.New("with -api-url, -mysql-dsn must name the orchestrator's database (…/orchestrator)")
	}
	cfg.ParseTime = true
	s.info.Database = cfg.DBName
	if s.db, err = openDB(cfg.FormatDSN()); err != nil {
		return err
	}
	s.api = newClient(o.apiURL, o.token, hc)
	if !o.noWorkers {
		if s.workerBin, err = findBinary(o.binDir, "worker"); err != nil {
			return err
		}
		cfgPath := filepath.Join(s.dir, "config.yaml")
		if err := os.WriteFile(cfgPath, []byte(stackConfig(o, false)), 0o600); err != nil {
			return fmt.Errorf("write config: %w", err)
		}
		s.workerEnv = []string{
			"ORCH_CONFIG=" + cfgPath, "ORCH_REDIS_ADDR=" + o.redisAddr, "ORCH_REDIS_PREFIX=" + o.redisPrefix,
			"ORCH_API_URL=" + o.apiURL, "ORCH_API_TOKEN=" + o.workerToken, "ORCH_LOG_FORMAT=json",
		}
		s.workerEnv = append(s.workerEnv, runtimeEnv(o)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if _, err := s.api.Readyz(ctx); err != nil {
		return fmt.Errorf("external orchestrator at %s: %w", o.apiURL, err)
	}
	return nil
}

// stackConfig is the YAML of the bench's stack: the job type under test, so workers read one
// stream, and the worker settings of the flags. The default admission policy (5000 submits/s
// per agent) is lifted to the most it may be: the bench measures what the stack can take, and
// the backlog scenario's batch fill goes well above it. Every submit still goes through the
// token bucket (whose tokens an instance takes from Redis in batches: see the admission
// scenario). With parked (the bench's own stack), a second noop type, parkedType, which no
// worker serves: the admission scenario submits to it, so that its jobs stay out of the stream
// of the type under test.
func stackConfig(o *options, parked bool) string {
	types := fmt.Sprintf("job_types:\n  %s:\n    handler: noop\n", o.jobType)
	if parked && o.jobType != parkedType {
		types += fmt.Sprintf("  %s:\n    handler: noop\n", parkedType)
	}
	if parked {
		types += gpuTypesConfig()
	}
	return fmt.Sprintf("%sworker:\n  concurrency: %d\n"+
		"admission:\n  default_policy:\n    rate_per_sec: %d\n    burst: %d\n",
		types, o.concurrency, benchAdmissionRate, benchAdmissionBurst)
}

// The bench's agent policy: the largest rate and burst a policy may have.
const (
	benchAdmissionRate  = 1000000
	benchAdmissionBurst = 10000000
)

// waitReady polls /readyz until the orchestrator answers ok, failing early if it exits.
func (s *stack) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		h, err := s.api.Readyz(cctx)
		ccancel()
		if err == nil && h.Status == "ok" {
			return nil
		}
		select {
		case <-s.orch.done:
			return fmt.Errorf("orchestrator exited (%s) before it was ready; log tail:\n%s", exitText(s.orch.err), s.orch.logTail(4096))
		case <-ctx.Done():
			last := "status " + h.Status
			if err != nil {
				last = err.Error()
			}
			return fmt.Errorf("orchestrator not ready within %s (last: %s); log in %s", readyWait, last, s.orch.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// check returns an error when a process the bench started has died, so that a scenario fails
// at once instead of waiting for its deadline.
func (s *stack) check() error {
	if s.orch != nil && s.orch.exited() {
		return fmt.Errorf("the orchestrator exited (%s); log tail:\n%s", exitText(s.orch.err), s.orch.logTail(2048))
	}
	for _, w := range s.workers {
		if w.exited() {
			return fmt.Errorf("worker %s exited (%s); log tail:\n%s", w.name, exitText(w.err), w.logTail(2048))
		}
	}
	return nil
}

// canManageWorkers reports whether the bench starts and stops the workers.
func (s *stack) canManageWorkers() bool { return !s.o.noWorkers }

// startWorkers starts -workers worker processes and waits until each has started its loop.
func (s *stack) startWorkers(ctx context.Context) error {
	if !s.canManageWorkers() || len(s.workers) > 0 {
		return nil
	}
	s.generation++
	for i := range s.o.workers {
		id := fmt.Sprintf("bench-w%d-%d", s.generation, i+1)
		p, err := startProcess(s.dir, id, s.workerBin, slices.Concat(s.workerEnv, []string{"ORCH_WORKER_ID=" + id}),
			"-types", s.o.jobType, "-concurrency", fmt.Sprint(s.o.concurrency))
		if err != nil {
			return err
		}
		s.workers = append(s.workers, p)
	}
	ctx, cancel := context.WithTimeout(ctx, workerWait)
	defer cancel()
	for _, p := range s.workers {
		if err := p.waitLog(ctx, `"worker started"`); err != nil {
			return fmt.Errorf("start workers: %w", err)
		}
	}
	return nil
}

// startGPUWorkers starts a worker of the GPU job type typ on each of nodes, each node with the
// simulated GPUs benchSimGPUs and each worker with room to read several jobs at once, and
// waits until they have started. It returns the workers it started, also on an error: the
// caller stops them.
func (s *stack) startGPUWorkers(ctx context.Context, typ string, nodes []string) ([]*process, error) {
	var ps []*process
	for _, node := range nodes {
		s.generation++
		id := fmt.Sprintf("bench-gpu-%d", s.generation)
		p, err := startProcess(s.dir, id, s.workerBin, slices.Concat(s.workerEnv, []string{"ORCH_WORKER_ID=" + id,
			"ORCH_NODE_ID=" + node, "ORCH_SIM_GPUS=" + benchSimGPUs, "ORCH_NVML_DISABLE=1"}),
			"-types", typ, "-concurrency", strconv.Itoa(gpuWorkerConcurrency))
		if err != nil {
			return ps, err
		}
		ps = append(ps, p)
	}
	ctx, cancel := context.WithTimeout(ctx, workerWait)
	defer cancel()
	for _, p := range ps {
		if err := p.waitLog(ctx, `"worker started"`); err != nil {
			return ps, fmt.Errorf("start the GPU worker %s: %w", p.name, err)
		}
	}
	return ps, nil
}

// waitGPUs polls GET /gpus until node has a GPU with fresh telemetry, up to gpuWait.
func (s *stack) waitGPUs(ctx context.Context, node string) error {
	ctx, cancel := context.WithTimeout(ctx, gpuWait)
	defer cancel()
	t0 := time.Now()
	for {
		var last string // why the node is not ready yet, set by every case below
		gl, err := s.api.ListGPUs(ctx, node)
		switch {
		case err != nil:
			last = err.Error()
		case len(gl.GPUs) == 0:
			last = "no GPU reported yet"
		default:
			for _, g := range gl.GPUs {
				if g.Fresh && !g.Lost {
					if d := time.Since(t0); d > time.Second {
						progress("node %s reported its GPUs after %.1fs", node, d.Seconds())
					}
					return nil
				}
			}
			last = "no GPU with fresh telemetry"
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: %s after %s", node, last, gpuWait)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopWorkers drains every worker (SIGTERM) in parallel and waits for them to exit.
func (s *stack) stopWorkers() error {
	var wg sync.WaitGroup
	errs := make([]error, len(s.workers))
	for i, p := range s.workers {
		wg.Go(func() { errs[i] = p.stop(stopGrace) })
	}
	wg.Wait()
	s.workers = nil
	return errors.Join(errs...)
}

// close stops every process, then (unless -keep) drops the database, deletes the Redis keys and
// removes the log directory. It is safe on a partly set up stack.
func (s *stack) close() {
	if err := s.stopWorkers(); err != nil {
		progress("cleanup: %v", err)
	}
	if s.orch != nil {
		if err := s.orch.stop(stopGrace); err != nil {
			progress("cleanup: %v", err)
		}
	}
	if s.db != nil {
		_ = s.db.Close()
	}
	if s.o.keep {
		if s.sqlitePath != "" {
			progress("cleanup: -keep: the SQLite database %s and the logs in %s are left", s.sqlitePath, s.dir)
		} else {
			progress("cleanup: -keep: database %q, redis prefix %q and logs in %s are left", s.dbName, s.prefix, s.dir)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if s.dbName != "" {
		if err := execServer(ctx, s.serverCfg, "DROP DATABASE IF EXISTS `"+s.dbName+"`"); err != nil {
			progress("cleanup: drop database %s: %v", s.dbName, err)
		}
	}
	if s.prefix != "" {
		if err := deleteRedisKeys(ctx, s.o.redisAddr, s.prefix); err != nil {
			progress("cleanup: delete redis keys %s*: %v", s.prefix, err)
		}
	}
	_ = os.RemoveAll(s.dir)
}

// execServer runs one statement on the MariaDB server of cfg (no database selected).
func execServer(ctx context.Context, cfg *mysql.Config, q string) error {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("connect to MariaDB: %w", err)
	}
	db := sql.OpenDB(conn)
	defer func() { _ = db.Close() }() // one statement, already answered
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("MariaDB at %s: %w", cfg.Addr, err)
	}
	return nil
}

// openDB opens the measurement connection pool; a few connections are plenty.
func openDB(dsn string) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	db.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	return db, nil
}

// openSQLite opens the embedded mode's database for reading, next to the orchestrator that
// writes it (WAL lets readers in while it commits).
func openSQLite(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "query_only(1)")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	return db, nil
}

// deleteRedisKeys removes every key under prefix.
func deleteRedisKeys(ctx context.Context, addr, prefix string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }() // the deletes are answered; closing only frees connections
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	if len(keys) == 0 {
		return nil
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("del: %w", err)
	}
	return nil
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	return addr, nil
}

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runtimeEnv is the Go runtime setting of the processes the bench starts (-gomaxprocs).
func runtimeEnv(o *options) []string {
	if o.gomaxprocs == 0 {
		return nil
	}
	return []string{"GOMAXPROCS=" + strconv.Itoa(o.gomaxprocs)}
}
