package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // reads the embedded mode's database

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/streams"
)

// newEmbedded prepares (but does not start) an embedded-mode deployment: no MariaDB, no
// Redis, no tokens, only a data directory and two free loopback ports (the API and the
// in-process Redis). The returned cluster's db reads the SQLite file (its queries are the
// harness's, plain SQL), and its streams client talks to the in-process Redis while an
// orchestrator runs.
func newEmbedded(t *testing.T, extraConfig string) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end tests start real processes; skipped with -short")
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(baseConfig+extraConfig), 0o600))
	addr, redisAddr := freeAddr(t), freeAddr(t)
	dataDir := filepath.Join(dir, "data")
	c := &cluster{
		t: t, dir: dir, addr: addr,
		env: []string{
			"ORCH_CONFIG=" + cfgPath,
			"ORCH_HTTP_ADDR=" + addr,
			"ORCH_DATA_DIR=" + dataDir,
			"ORCH_EMBEDDED_REDIS_ADDR=" + redisAddr,
			"ORCH_API_URL=http://" + addr,
			"ORCH_LOG_LEVEL=info",
			// Nothing of the test process's environment may turn tokens on or point elsewhere.
			"ORCH_TOKENS_FILE=", "ORCH_API_TOKENS=", "ORCH_API_TOKEN=", "ORCH_REDIS_PREFIX=",
		},
	}
	var err error
	c.db, err = sql.Open("sqlite", filepath.Join(dataDir, sqlite.DBFileName)+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	c.db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = c.db.Close() })
	c.rdb = streams.NewRedis(redisAddr, "")
	t.Cleanup(func() { _ = c.rdb.Close() })
	c.streams = streams.New(c.rdb, streams.Options{})
	c.api = client.New("http://"+addr, "")
	return c
}

// startDev starts `orchestrator dev` and waits until it is ready.
func (c *cluster) startDev(name string, extraEnv ...string) *proc {
	c.t.Helper()
	p := c.start(name, "orchestrator", extraEnv, "dev")
	c.waitReady()
	return p
}

// orchctl runs the orchctl binary against the cluster and returns its combined output.
func (c *cluster) orchctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "orchctl"), args...)
	cmd.Env = append(os.Environ(), c.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// submitWithOrchctl submits every id with `orchctl jobs submit` from p concurrent producers.
// A submit that fails (the orchestrator is down) is tried again with the same id until it
// succeeds or d passes: the job id makes the retry idempotent. It returns how many orchctl
// calls failed along the way.
func (c *cluster) submitWithOrchctl(typ, payload string, ids []string, p int, d time.Duration) int {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures int
		errs     []error
	)
	next := make(chan string)
	for range p {
		wg.Go(func() {
			for id := range next {
				for {
					out, err := c.orchctl(ctx, "jobs", "submit", "--type", typ, "--agent", "e2e",
						"--job-id", id, "--payload", payload, "-q")
					if err == nil {
						break
					}
					mu.Lock()
					failures++
					mu.Unlock()
					if ctx.Err() != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("submit %s: %w: %s", id, err, out))
						mu.Unlock()
						break
					}
					// Polling interval while the orchestrator restarts, not synchronisation.
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
	require.Empty(t, errs)
	return failures
}

// waitCount polls the database until cond holds for the status counts, failing after d.
func (c *cluster) waitCount(d time.Duration, what string, cond func(map[string]int) bool) map[string]int {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		counts := c.statusCounts()
		if cond(counts) {
			return counts
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s never happened; jobs by status: %v", d, what, counts)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// auditCount returns how many audit rows have the event type.
func (c *cluster) auditCount(eventType string) int {
	var n int
	require.NoError(c.t, c.db.QueryRow(`SELECT COUNT(*) FROM orchestrator_audit WHERE event_type = ?`, eventType).Scan(&n))
	return n
}

// waitExit waits up to d for the process to exit on its own and returns its exit error.
func (p *proc) waitExit(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s", p.name, d)
		return nil
	}
}
