package e2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/streams"
)

// This file adds to the harness what the leadership and chaos tests need: several orchestrator
// instances behind a failover proxy, and private MariaDB and Redis servers that a test may kill
// and wipe (the shared ones serve other test packages at the same time and are never touched).

// instance is one orchestrator of a cluster: a fixed HTTP address, and the process currently
// serving it (a new incarnation after each restart).
type instance struct {
	name   string
	addr   string
	api    *client.Client
	proc   *proc
	starts int
}

// newInstance prepares an orchestrator instance of c on addr (not started).
func (c *cluster) newInstance(name, addr string) *instance {
	return &instance{name: name, addr: addr, api: client.New("http://"+addr, c.adminToken, client.WithTimeout(5*time.Second))}
}

// startInstance starts a new incarnation of o (name-1, name-2, ...) without waiting for it.
func (c *cluster) startInstance(o *instance) {
	o.starts++
	o.proc = c.start(fmt.Sprintf("%s-%d", o.name, o.starts), "orchestrator", []string{"ORCH_HTTP_ADDR=" + o.addr}, "serve")
}

// waitReady polls o's /readyz until it answers 200.
func (o *instance) waitReady(t *testing.T, d time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := o.api.Readyz(ctx)
		return err == nil && h.Status == "ok"
	}, d, 20*time.Millisecond, "%s never became ready", o.name)
}

// alive reports whether o's current process has not exited.
func (o *instance) alive() bool {
	if o.proc == nil {
		return false
	}
	select {
	case <-o.proc.done:
		return false
	default:
		return true
	}
}

// status reads o's GET /status (admin token), within 5 s: a status call is not timed, and a
// loaded machine may take seconds to answer it.
func (c *cluster) status(o *instance) (client.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return o.api.Status(ctx)
}

// leaderOf returns the instance among insts that says it leads in a term above minTerm, and its
// status; nil when none does (now).
func (c *cluster) leaderOf(insts []*instance, minTerm int64) (*instance, client.Status) {
	for _, o := range insts {
		if !o.alive() {
			continue
		}
		st, err := c.status(o)
		if err == nil && st.ThisInstanceLeads && st.Leader != nil && st.Leader.Term > minTerm {
			return o, st
		}
	}
	return nil, client.Status{}
}

// waitLeader polls the instances every 10 ms until one of them leads in a term above minTerm.
func (c *cluster) waitLeader(insts []*instance, minTerm int64, d time.Duration) (*instance, client.Status) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if o, st := c.leaderOf(insts, minTerm); o != nil {
			return o, st
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no instance leads in a term above %d after %s", minTerm, d)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// metricSeries sums, per series, the samples of the named metrics on o's /metrics into into.
func (c *cluster) metricSeries(o *instance, into map[string]float64, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+c.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return // a scrape is a figure for the log, not a check
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, n := range names {
			if !strings.HasPrefix(line, n) {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err == nil && v != 0 {
				into[line[:i]] += v
			}
		}
	}
}

// failover is an HTTP proxy in front of several orchestrator instances, as a load balancer
// would be: requests go round-robin, and one whose instance refuses the connection (killed,
// restarting) goes to the next. A request that fails once sent is answered 502, and the
// caller retries, as it would behind a real balancer.
type failover struct {
	url      string
	backends []string
	next     atomic.Uint64
	tr       *http.Transport
}

func newFailover(t *testing.T, backends ...*instance) *failover {
	f := &failover{tr: &http.Transport{MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: 30 * time.Second}}
	for _, b := range backends {
		f.backends = append(f.backends, b.addr)
	}
	srv := httptest.NewServer(f)
	f.url = srv.URL
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		f.tr.CloseIdleConnections()
	})
	return f
}

func (f *failover) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	first := int(f.next.Add(1))
	var lastErr error
	for i := range f.backends {
		b := f.backends[(first+i)%len(f.backends)]
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+b+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := f.tr.RoundTrip(req)
		if err != nil {
			lastErr = err
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				continue // nothing was sent: the next instance may take it
			}
			break
		}
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		_ = resp.Body.Close()
		return
	}
	http.Error(w, fmt.Sprintf("failover proxy: %v", lastErr), http.StatusBadGateway)
}

// startChild starts a program that is not one of ours (redis-server, mariadbd) as a child
// process with its output in dir/name.log, killed at cleanup like the harness's processes.
func startChild(t *testing.T, dir, name string, argv ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start(), "start %s", argv[0])
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("---- %s log (last 2 KiB) ----\n%s", name, tail(b, 2048))
		}
	})
	return p
}

// privateRedis is a redis-server of the test's own, without persistence: restarting it wipes it.
type privateRedis struct {
	t      *testing.T
	dir    string
	addr   string
	proc   *proc
	starts int
}

// startPrivateRedis starts a redis-server on a free loopback port; ok is false when there is no
// redis-server binary here.
func startPrivateRedis(t *testing.T) (r *privateRedis, ok bool) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, false
	}
	r = &privateRedis{t: t, dir: t.TempDir(), addr: freeAddr(t)}
	r.start()
	return r, true
}

func (r *privateRedis) start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.starts++
	r.proc = startChild(r.t, r.dir, fmt.Sprintf("redis-%d", r.starts), "redis-server",
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", r.dir)
	rdb := streams.NewRedis(r.addr, "")
	defer rdb.Close()
	require.Eventually(r.t, func() bool {
		return rdb.Ping(context.Background()).Err() == nil
	}, 20*time.Second, 10*time.Millisecond, "private redis never answered")
}

// wipe kills Redis with SIGKILL and starts an empty one on the same port (a new run_id).
func (r *privateRedis) wipe() {
	r.proc.kill()
	r.start()
}

// hang stops Redis with SIGSTOP: connections stay open and new ones are accepted by the
// kernel, but nothing is answered, so every call waits for its deadline. resume continues it.
func (r *privateRedis) hang()   { r.proc.signal(syscall.SIGSTOP) }
func (r *privateRedis) resume() { r.proc.signal(syscall.SIGCONT) }

// hang stops MariaDB with SIGSTOP (see privateRedis.hang); resume continues it.
func (m *privateMariaDB) hang()   { m.proc.signal(syscall.SIGSTOP) }
func (m *privateMariaDB) resume() { m.proc.signal(syscall.SIGCONT) }

// signal sends sig to p's process (not its group: a server's own children, if any, go on).
func (p *proc) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// privateMariaDB is a MariaDB server of the test's own, on a data directory in a temporary
// directory, that the test may kill and start again (InnoDB recovers on the same data).
type privateMariaDB struct {
	t       *testing.T
	dir     string
	datadir string
	addr    string
	server  string // mariadbd or mysqld
	proc    *proc
	starts  int
}

// startPrivateMariaDB creates a data directory (root without a password) and starts a server
// on a free loopback port. It returns an error, without failing the test, when the server
// cannot be installed here.
func startPrivateMariaDB(t *testing.T) (*privateMariaDB, error) {
	server := firstInPath("mariadbd", "mysqld")
	install := firstInPath("mariadb-install-db", "mysql_install_db")
	if server == "" || install == "" {
		return nil, errors.New("no mariadbd and mariadb-install-db in PATH (or /usr/sbin)")
	}
	m := &privateMariaDB{t: t, dir: t.TempDir(), addr: freeAddr(t), server: server}
	m.datadir = filepath.Join(m.dir, "data")
	args := []string{"--no-defaults", "--datadir=" + m.datadir, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	out, err := exec.Command(install, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", install, err, tail(out, 2048))
	}
	m.start()
	return m, nil
}

func firstInPath(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		if p := filepath.Join("/usr/sbin", n); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// start starts the server on the data directory and waits until it accepts connections.
func (m *privateMariaDB) start() {
	m.t.Helper()
	_, port, _ := net.SplitHostPort(m.addr)
	args := []string{m.server, "--no-defaults", "--datadir=" + m.datadir, "--port=" + port,
		"--bind-address=127.0.0.1", "--socket=" + filepath.Join(m.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(m.dir, "mysqld.pid"), "--skip-name-resolve", "--skip-log-bin",
		"--innodb-flush-log-at-trx-commit=1", "--innodb-buffer-pool-size=128M", "--max-connections=500"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	m.starts++
	began := time.Now()
	m.proc = startChild(m.t, m.dir, fmt.Sprintf("mariadb-%d", m.starts), args...)
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", m.addr
	cfg.Timeout = time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(m.t, err)
	defer db.Close()
	require.Eventually(m.t, func() bool {
		return db.Ping() == nil
	}, 60*time.Second, 20*time.Millisecond, "private MariaDB never accepted connections")
	m.t.Logf("private MariaDB %s up in %s (start %d)", m.addr, time.Since(began).Round(time.Millisecond), m.starts)
}

// kill stops the server with SIGKILL: a crash, recovered by InnoDB at the next start.
func (m *privateMariaDB) kill() { m.proc.kill() }

// dsn is the DSN of database name on the server.
func (m *privateMariaDB) dsn(name string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName, cfg.ParseTime = "root", "tcp", m.addr, name, true
	return cfg.FormatDSN()
}

// newClusterOn prepares a deployment on the given MariaDB database and Redis (the harness's
// newCluster uses the shared test servers); config is the whole YAML.
func newClusterOn(t *testing.T, dsn, redisAddr, prefix, config string) *cluster {
	t.Helper()
	dir := t.TempDir()
	admin, adminLine, err := api.GenerateToken("admin", "")
	require.NoError(t, err)
	wtok, workerLine, err := api.GenerateToken("worker", "")
	require.NoError(t, err)
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte(adminLine+"\n"+workerLine+"\n"), 0o600))
	cfgPath := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(config), 0o600))
	addr := freeAddr(t)
	c := &cluster{
		t: t, dir: dir, addr: addr, adminToken: admin, workerToken: wtok,
		env: []string{
			"ORCH_CONFIG=" + cfgPath,
			"ORCH_MYSQL_DSN=" + dsn,
			"ORCH_REDIS_ADDR=" + redisAddr,
			"ORCH_REDIS_PREFIX=" + prefix,
			"ORCH_HTTP_ADDR=" + addr,
			"ORCH_TOKENS_FILE=" + tokens,
			"ORCH_API_URL=http://" + addr,
			"ORCH_LOG_LEVEL=info",
		},
	}
	c.db, err = sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.db.Close() })
	c.rdb = streams.NewRedis(redisAddr, "")
	t.Cleanup(func() { _ = c.rdb.Close() })
	c.streams = streams.New(c.rdb, streams.Options{Prefix: prefix})
	c.api = client.New("http://"+addr, admin)
	return c
}

// countsNow returns the jobs per status, or an error (the database may be down).
func (c *cluster) countsNow() (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.db.QueryContext(ctx, `SELECT status, COUNT(*) FROM orchestrator_jobs GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// logUnfinished logs up to limit jobs that are neither done nor dead-lettered, with their last
// error and audit trail: what a failed run needs to be understood.
func (c *cluster) logUnfinished(limit int) {
	t := c.t
	rows, err := c.db.Query(`SELECT job_id, type, status, attempts, max_attempts, COALESCE(last_error, ''),
		COALESCE(worker_id, ''), enqueued, COALESCE(stream_id, ''), available_at FROM orchestrator_jobs
		WHERE status NOT IN ('done', 'dead_letter') ORDER BY job_id LIMIT ?`, limit)
	if err != nil {
		t.Logf("list unfinished jobs: %v", err)
		return
	}
	type row struct {
		id, typ, status, lastErr, worker, streamID string
		attempts, maxAttempts                      int
		enqueued                                   bool
		availableAt                                time.Time
	}
	var jobs []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.typ, &r.status, &r.attempts, &r.maxAttempts, &r.lastErr, &r.worker,
			&r.enqueued, &r.streamID, &r.availableAt); err != nil {
			t.Logf("scan unfinished job: %v", err)
			break
		}
		jobs = append(jobs, r)
	}
	_ = rows.Close()
	for _, r := range jobs {
		// Is the entry the job was last published with still in its stream (its type's)?
		entry := "no stream_id"
		if r.streamID != "" {
			msgs, err := c.rdb.XRange(context.Background(), c.streams.StreamKey(r.typ), r.streamID, r.streamID).Result()
			entry = fmt.Sprintf("entry %s in stream: %v (%v)", r.streamID, len(msgs) == 1, err)
		}
		t.Logf("unfinished %s (%s): %s, attempts %d/%d, worker %q, enqueued %v, %s, available_at %s, last_error %q\n  audit: %v",
			r.id, r.typ, r.status, r.attempts, r.maxAttempts, r.worker, r.enqueued, entry,
			r.availableAt.Format(time.RFC3339Nano), r.lastErr, c.auditTrail(r.id))
	}
}

// auditTrail returns "event(actor)" of a job's audit rows, oldest first, without failing.
func (c *cluster) auditTrail(jobID string) []string {
	rows, err := c.db.Query(`SELECT event_type, COALESCE(actor, '') FROM orchestrator_audit WHERE job_id = ? ORDER BY id`, jobID)
	if err != nil {
		return []string{err.Error()}
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ev, actor string
		if err := rows.Scan(&ev, &actor); err != nil {
			return append(out, err.Error())
		}
		out = append(out, ev+"("+actor+")")
	}
	return out
}
