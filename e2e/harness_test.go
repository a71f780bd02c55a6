package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/streams"
)

// binDir holds the binaries built once for the package.
var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "orch-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-race", "-o", dir+"/", "../cmd/orchestrator", "../cmd/worker", "../cmd/orchctl")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.Exit(1)
	}
	// ORCH_TEST_BUSY=n runs every test beside n spinning goroutines: the tests must pass on a
	// loaded machine.
	stopBusy := testenv.BusyFromEnv()
	code := m.Run()
	stopBusy()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// cluster is one isolated deployment: a fresh database, a Redis key prefix, tokens, a config.
type cluster struct {
	t           *testing.T
	dir         string
	env         []string
	addr        string
	adminToken  string
	workerToken string
	db          *sql.DB
	rdb         *redis.Client
	streams     *streams.Client
	api         *client.Client
}

// newCluster prepares (but does not start) a deployment; extraConfig is appended to the YAML.
func newCluster(t *testing.T, extraConfig string) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end tests start real processes; skipped with -short")
	}
	dsn := testenv.MySQLEmptyDSN(t)
	prefix := testenv.RedisPrefix(t)
	redisAddr := testenv.RedisAddr(t)
	dir := t.TempDir()
	admin, adminLine, err := api.GenerateToken("admin", "")
	require.NoError(t, err)
	wtok, workerLine, err := api.GenerateToken("worker", "")
	require.NoError(t, err)
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte(adminLine+"\n"+workerLine+"\n"), 0o600))
	cfgPath := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(baseConfig+extraConfig), 0o600))
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

// baseConfig serves noop, sleep and an exec type running cat (the payload comes back as result).
const baseConfig = `
dispatch_interval: 200ms
shutdown_grace: 10s
job_types:
  noop: {}
  sleep: {}
  echo:
    handler: exec
    command: cat
worker:
  concurrency: 20
  block: 200ms
  commands:
    cat:
      argv: ["cat"]
`

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// proc is a running child process whose output goes to a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (c *cluster) start(name, bin string, extraEnv []string, args ...string) *proc {
	t := c.t
	t.Helper()
	logPath := filepath.Join(c.dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(binDir, bin), args...)
	cmd.Env = append(append(os.Environ(), c.env...), extraEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
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
			t.Logf("---- %s log: warnings and errors (last 8 KiB of them) ----\n%s", name, tail(problems(b), 8192))
			t.Logf("---- %s log (last 4 KiB) ----\n%s", name, tail(b, 4096))
		}
	})
	return p
}

// problemMarks mark the log lines problems keeps, in the text and the JSON log formats.
var problemMarks = [][]byte{[]byte("level=WARN"), []byte("level=ERROR"), []byte(`"level":"WARN"`),
	[]byte(`"level":"ERROR"`), []byte("panic:")}

// problems returns the lines of a process log at level WARN or ERROR, and panics: what a
// failure under load is explained by, often long before the log's tail.
func problems(log []byte) []byte {
	var out []byte
	for line := range bytes.Lines(log) {
		for _, mark := range problemMarks {
			if bytes.Contains(line, mark) {
				out = append(out, line...)
				break
			}
		}
	}
	return out
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// kill sends SIGKILL to the process group and waits for the exit.
func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM and waits up to d for a clean exit, returning the exit error.
func (p *proc) terminate(t *testing.T, d time.Duration) error {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s of SIGTERM", p.name, d)
		return nil
	}
}

func (c *cluster) startOrchestrator(name string) *proc {
	p := c.start(name, "orchestrator", nil, "serve")
	c.waitReady()
	return p
}

func (c *cluster) startWorker(name string, extraEnv ...string) *proc {
	env := append([]string{"ORCH_API_TOKEN=" + c.workerToken, "ORCH_WORKER_ID=" + name}, extraEnv...)
	return c.start(name, "worker", env)
}

// waitReady polls /readyz until it answers 200.
func (c *cluster) waitReady() {
	t := c.t
	t.Helper()
	require.Eventually(t, func() bool {
		// A probe may take seconds on a loaded machine; the deadline is the Eventually's.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := c.api.Readyz(ctx)
		return err == nil && h.Status == "ok"
	}, 60*time.Second, 50*time.Millisecond, "orchestrator never became ready")
}

// statusCounts returns the number of jobs per status.
func (c *cluster) statusCounts() map[string]int {
	rows, err := c.db.Query(`SELECT status, COUNT(*) FROM orchestrator_jobs GROUP BY status`)
	require.NoError(c.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(c.t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(c.t, rows.Err())
	return out
}

// waitStatus waits until want jobs have the status, failing with the counts after d.
func (c *cluster) waitStatus(status string, want int, d time.Duration) {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		counts := c.statusCounts()
		if counts[status] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: want %d jobs %s, have %v", d, want, status, counts)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
}

// submitMany submits ids over HTTP with p concurrent producers.
func (c *cluster) submitMany(typ string, ids []string, payload func(i int) string, p int) {
	t := c.t
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	next := make(chan int)
	for range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := c.api.Submit(context.Background(), client.SubmitRequest{
					JobID: ids[i], Type: typ, Agent: "e2e", Payload: []byte(payload(i)),
				})
				if err != nil {
					errs <- fmt.Errorf("submit %s: %w", ids[i], err)
				}
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// doneAuditCounts returns, per job, how many times it went running → done.
func (c *cluster) doneAuditCounts() map[string]int {
	rows, err := c.db.Query(`SELECT job_id, COUNT(*) FROM orchestrator_audit WHERE event_type = 'job.running->done' GROUP BY job_id`)
	require.NoError(c.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(c.t, rows.Scan(&id, &n))
		out[id] = n
	}
	return out
}

// pendingEntries sums the unacknowledged entries of the groups of the given types.
func (c *cluster) pendingEntries(types map[string]string) int64 {
	var total int64
	for typ, stream := range types {
		n, err := c.streams.PendingCount(context.Background(), stream, streams.GroupName(typ))
		require.NoError(c.t, err)
		total += n
	}
	return total
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

func logContains(p *proc, s string) bool {
	b, _ := os.ReadFile(p.log)
	return bytes.Contains(b, []byte(s))
}
