package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/internal/testenv"
)

// chaosConfig has short timings so that every fault heals within seconds: leases expire 3 s
// after their worker goes quiet, idle stream entries are looked at after 2 s, retries wait
// 100 ms to 1 s. Four job types: noop, sleep, flaky (an exec command that fails the first
// time it runs for a job, then succeeds) and doomed (an exec command that always fails, three
// attempts). The types that must end done get attempts to spare for the attempts that faults
// take from them (a killed worker's jobs fail their attempt, "worker lost").
func chaosConfig(flakyScript string) string {
	return fmt.Sprintf(`
claim_idle: 2s
reclaim_interval: 500ms
dispatch_interval: 200ms
shutdown_grace: 5s
leases:
  ttl: 3s
  purge_interval: 500ms
telemetry:
  poll_interval: 500ms
job_types:
  noop: {max_attempts: 10, backoff: {initial: 100ms, max: 1s}}
  sleep: {max_attempts: 10, backoff: {initial: 100ms, max: 1s}}
  flaky: {handler: exec, command: flaky, max_attempts: 10, backoff: {initial: 100ms, max: 1s}}
  doomed: {handler: exec, command: doomed, max_attempts: %d, backoff: {initial: 100ms, max: 1s}}
worker:
  concurrency: 20
  block: 200ms
  commands:
    flaky:
      argv: [%q]
    doomed:
      argv: ["false"]
`, doomedAttempts, flakyScript)
}

const doomedAttempts = 3

// flakyScript fails the first run of each job (it leaves a marker named after ORCH_JOB_ID in
// dir) and succeeds on every later one.
const flakyScript = `#!/bin/sh
marker='%s'/"$ORCH_JOB_ID"
if [ -e "$marker" ]; then
  echo '{"flaky":"second run"}'
  exit 0
fi
: > "$marker"
echo 'flaky: the first run fails' >&2
exit 1
`

// chaosJob is one job of the chaos run.
type chaosJob struct {
	id, typ, payload string
}

// chaosJobs returns the 5,000 jobs in a random order: 2,500 noop, 1,500 sleep of 10-200 ms,
// 700 flaky, 300 doomed.
func chaosJobs(rng *rand.Rand) []chaosJob {
	var jobs []chaosJob
	add := func(typ string, n int, payload func() string) {
		for i := range n {
			jobs = append(jobs, chaosJob{id: fmt.Sprintf("%s-%05d", typ, i), typ: typ, payload: payload()})
		}
	}
	add("noop", 2500, func() string { return `{}` })
	add("sleep", 1500, func() string { return fmt.Sprintf(`{"ms": %d}`, 10+rng.IntN(191)) })
	add("flaky", 700, func() string { return `{}` })
	add("doomed", 300, func() string { return `{}` })
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	return jobs
}

var chaosStreams = map[string]string{"noop": "noop", "sleep": "sleep", "flaky": "flaky", "doomed": "doomed"}

// TestChaos is the acceptance test of fault tolerance: 5,000 jobs are submitted over about 40 s
// through a failover proxy to two orchestrators, and worked by three workers, while one worker
// is killed with SIGKILL every 3 s (and restarted), the leader is killed with SIGKILL twice (and
// restarted), Redis is killed and comes back empty, MariaDB is killed and restarted, and each
// of them hangs (SIGSTOP, then SIGCONT) for twice the lease TTL. Redis and MariaDB are private
// servers of the test (the shared ones serve other packages). In the end every job is done,
// except the always-failing ones, dead-lettered after exactly their attempts and present on the
// DLQ stream; no job is lost, none is done twice, no entry stays unacknowledged and no lease
// active, and no process died on its own. The Redis hang costs no live worker a lease: the
// leases live in MariaDB, and the workers renew them without waiting on Redis. (During the
// MariaDB hang leases may expire: the renewals cannot be recorded.)
func TestChaos(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end tests start real processes; skipped with -short")
	}
	began := time.Now()

	// Private servers, so that they may be killed and wiped.
	redisAddr, prefix := "", "chaos:"
	rs, ok := startPrivateRedis(t)
	if ok {
		redisAddr = rs.addr
	} else {
		t.Log("NO redis-server BINARY: running without the Redis wipe, on the shared Redis")
		redisAddr, prefix = testenv.RedisAddr(t), testenv.RedisPrefix(t)
	}
	md, err := startPrivateMariaDB(t)
	var dsn string
	if err == nil {
		dsn = md.dsn("orch_chaos")
	} else {
		t.Logf("NO PRIVATE MariaDB (%v): running without the MariaDB restart, on the shared server", err)
		dsn = testenv.MySQLEmptyDSN(t)
	}
	t.Logf("private servers ready in %s", time.Since(began).Round(time.Millisecond))

	stateDir := t.TempDir()
	script := filepath.Join(t.TempDir(), "flaky.sh")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf(flakyScript, stateDir)), 0o755))
	c := newClusterOn(t, dsn, redisAddr, prefix, chaosConfig(script))
	insts := []*instance{c.newInstance("orchestrator-a", c.addr), c.newInstance("orchestrator-b", freeAddr(t))}
	for _, o := range insts {
		c.startInstance(o)
		o.waitReady(t, time.Minute)
	}
	lb := newFailover(t, insts...)
	api := client.New(lb.url, c.adminToken, client.WithTimeout(5*time.Second))

	r := &chaosRun{t: t, c: c, insts: insts, lb: lb, workers: make([]*proc, 3), starts: make([]int, 3),
		reclaims: map[string]float64{}, killedAt: map[string]time.Time{}}
	t.Cleanup(func() {
		if t.Failed() {
			r.logEvents()
		}
	})
	for i := range r.workers {
		r.startWorker(i)
	}

	seed := rand.Uint64()
	t.Logf("job order seed %d", seed)
	jobs := chaosJobs(rand.New(rand.NewPCG(seed, 0)))
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		r.submit(api, jobs, 40*time.Second, 8)
	}()

	// The chaos, paced by the clock: that pacing is the behaviour under test.
	chaosStart := time.Now()
	var evs []chaosEvent
	for i, at := 0, 2*time.Second; at <= 44*time.Second; i, at = i+1, at+3*time.Second {
		slot := i % len(r.workers)
		evs = append(evs,
			chaosEvent{at, fmt.Sprintf("SIGKILL worker %d", slot+1), func() { r.killWorker(slot) }},
			chaosEvent{at + time.Second, fmt.Sprintf("restart worker %d", slot+1), func() { r.startWorker(slot) }})
	}
	var killedLeader *instance
	killLeader := func() { killedLeader = r.killLeader() }
	restartLeader := func() { c.startInstance(killedLeader) }
	evs = append(evs,
		chaosEvent{6 * time.Second, "SIGKILL the leader", killLeader},
		chaosEvent{8 * time.Second, "restart the killed orchestrator", restartLeader},
		chaosEvent{20 * time.Second, "SIGKILL the leader", killLeader},
		chaosEvent{22 * time.Second, "restart the killed orchestrator", restartLeader})
	// The hangs last twice the lease TTL (3 s), with a gap between them longer than the TTL,
	// so that a lease lost to one cannot be taken for one lost to the other.
	var redisHang hangWindow
	if rs != nil {
		evs = append(evs, chaosEvent{13 * time.Second, "SIGKILL Redis, start it empty", rs.wipe},
			chaosEvent{31 * time.Second, "SIGSTOP Redis (hang)", func() {
				redisHang.from = time.Now()
				r.holdStarts = true
				rs.hang()
			}},
			chaosEvent{37 * time.Second, "SIGCONT Redis", func() {
				rs.resume()
				redisHang.to = time.Now()
				r.releaseStarts()
			}})
	}
	if md != nil {
		evs = append(evs,
			chaosEvent{27 * time.Second, "SIGKILL MariaDB", md.kill},
			chaosEvent{29 * time.Second, "restart MariaDB", md.start},
			chaosEvent{41 * time.Second, "SIGSTOP MariaDB (hang)", md.hang},
			chaosEvent{47 * time.Second, "SIGCONT MariaDB", md.resume})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	tick := time.NewTicker(50 * time.Millisecond)
	for len(evs) > 0 {
		<-tick.C
		r.reviveCrashed()
		for len(evs) > 0 && time.Since(chaosStart) >= evs[0].at {
			ev := evs[0]
			evs = evs[1:]
			counts, _ := c.countsNow()
			t.Logf("%5.1fs %s (jobs: %v)", time.Since(chaosStart).Seconds(), ev.name, counts)
			ev.do()
		}
	}
	tick.Stop()
	<-submitted
	require.Empty(t, r.submitErrors(), "submits refused for good")
	t.Logf("%5.1fs chaos over; %d submits retried", time.Since(chaosStart).Seconds(), r.submitRetries.Load())

	// Every job reaches its end.
	deadline := time.Now().Add(2 * time.Minute)
	var counts map[string]int
	for lastLog := time.Now(); ; {
		r.reviveCrashed()
		counts, err = c.countsNow()
		if err == nil && counts["done"]+counts["dead_letter"] == len(jobs) {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("jobs by status: %v (%v)", counts, err)
			c.logUnfinished(30)
			t.Fatalf("after the chaos, not every job ended within 2m")
		}
		if time.Since(lastLog) > 5*time.Second {
			t.Logf("%5.1fs waiting: %v", time.Since(chaosStart).Seconds(), counts)
			lastLog = time.Now()
		}
		time.Sleep(250 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Logf("%5.1fs every job ended: %v", time.Since(chaosStart).Seconds(), counts)
	r.verify(jobs)
	if rs != nil {
		r.verifyNoLeaseLostTo("the Redis hang", redisHang, chaosLeaseTTL)
	}
	for _, o := range insts {
		c.metricSeries(o, r.reclaims, "gpu_orchestrator_reclaimed_total", "gpu_orchestrator_redis_recoveries_total")
	}
	r.logFigures(time.Since(began))
}

// chaosEvent is one fault (or repair) of the schedule, at an offset from the start.
type chaosEvent struct {
	at   time.Duration
	name string
	do   func()
}

// chaosRun is the state of a chaos run: the processes, and what the faults did.
type chaosRun struct {
	t     *testing.T
	c     *cluster
	insts []*instance
	lb    *failover

	workers []*proc // current incarnation per slot; nil while killed
	starts  []int   // incarnations per slot

	crashed []string // processes that exited without being killed
	// holdStarts defers the workers' restarts (while Redis hangs: a worker that cannot reach
	// Redis at start exits, and its supervisor would restart it later); held are the slots.
	holdStarts    bool
	held          []int
	killedAt      map[string]time.Time // worker id -> when the test killed it
	reclaims      map[string]float64
	submitRetries atomic.Int64
	mu            sync.Mutex
	submitErrs    []error
}

func (r *chaosRun) startWorker(slot int) {
	if r.holdStarts {
		r.workers[slot] = nil
		if !slices.Contains(r.held, slot) {
			r.held = append(r.held, slot)
		}
		return
	}
	r.starts[slot]++
	id := fmt.Sprintf("worker-%d-%d", slot+1, r.starts[slot])
	r.workers[slot] = r.c.startWorker(id, "ORCH_API_URL="+r.lb.url)
}

// releaseStarts starts the workers whose restart was held.
func (r *chaosRun) releaseStarts() {
	r.holdStarts = false
	for _, slot := range r.held {
		r.startWorker(slot)
	}
	r.held = nil
}

func (r *chaosRun) killWorker(slot int) {
	if r.workers[slot] == nil {
		return // its restart is held
	}
	r.killedAt[r.workers[slot].name] = time.Now()
	r.workers[slot].kill()
	r.workers[slot] = nil
}

// chaosLeaseTTL is leases.ttl of chaosConfig.
const chaosLeaseTTL = 3 * time.Second

// hangWindow is when a server was stopped (SIGSTOP) and continued (SIGCONT).
type hangWindow struct{ from, to time.Time }

// verifyNoLeaseLostTo checks that no lease of a live worker expired because of a hang: every
// lease that expired from the hang's start until a TTL after its end belonged to a worker
// the test had killed before the lease's expiry.
func (r *chaosRun) verifyNoLeaseLostTo(what string, w hangWindow, ttl time.Duration) {
	t := r.t
	require.False(t, w.from.IsZero() || w.to.IsZero(), "%s never happened", what)
	rows, err := r.c.db.Query(`SELECT job_id, COALESCE(JSON_VALUE(metadata, '$.worker_id'), ''), expires_at
		FROM orchestrator_leases WHERE status = 'expired' AND expires_at BETWEEN ? AND ?`,
		w.from.UTC(), w.to.Add(ttl).UTC())
	require.NoError(t, err)
	defer rows.Close()
	var expired int
	var lost []string
	for rows.Next() {
		var job, worker string
		var at time.Time
		require.NoError(t, rows.Scan(&job, &worker, &at))
		expired++
		if k, ok := r.killedAt[worker]; !ok || !k.Before(at) {
			lost = append(lost, fmt.Sprintf("%s of live worker %s expired %.1fs into the hang; audit %v",
				job, worker, at.Sub(w.from).Seconds(), r.c.auditTrail(job)))
		}
	}
	require.NoError(t, rows.Err())
	t.Logf("%s (%s): %d leases expired from its start to a TTL after its end, %d of them of killed workers",
		what, w.to.Sub(w.from).Round(time.Millisecond), expired, expired-len(lost))
	require.Empty(t, lost, "leases of live workers lost to %s", what)
}

// killLeader kills the current leader with SIGKILL (after a last scrape of its reclaimer
// figures) and returns it.
func (r *chaosRun) killLeader() *instance {
	o, st := r.c.waitLeader(r.insts, 0, 15*time.Second)
	r.c.metricSeries(o, r.reclaims, "gpu_orchestrator_reclaimed_total", "gpu_orchestrator_redis_recoveries_total")
	o.proc.kill()
	r.t.Logf("       killed %s, the leader of term %d", o.name, st.Leader.Term)
	return o
}

// reviveCrashed notes and restarts any process that exited without being killed: the
// orchestrators must survive MariaDB and Redis going away, the workers too.
func (r *chaosRun) reviveCrashed() {
	for slot, p := range r.workers {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			r.crashed = append(r.crashed, fmt.Sprintf("%s: %v: %s", p.name, p.err, lastLines(p, 3)))
			r.startWorker(slot)
		default:
		}
	}
	for _, o := range r.insts {
		if o.proc == nil {
			continue
		}
		select {
		case <-o.proc.done:
			if o.proc.err == nil || !strings.Contains(o.proc.err.Error(), "killed") {
				r.crashed = append(r.crashed, fmt.Sprintf("%s: %v: %s", o.proc.name, o.proc.err, lastLines(o.proc, 3)))
				r.c.startInstance(o)
			}
		default:
		}
	}
}

// submit submits the jobs through api at an even pace over d, with p producers; a submit that
// fails for a reason that may pass (proxy 502, 503 while MariaDB is down) is retried with the
// same job id, which is what makes it safe.
func (r *chaosRun) submit(api *client.Client, jobs []chaosJob, d time.Duration, p int) {
	next := make(chan chaosJob)
	var wg sync.WaitGroup
	for range p {
		wg.Go(func() {
			for j := range next {
				r.submitOne(api, j)
			}
		})
	}
	pace := time.NewTicker(d / time.Duration(len(jobs)/10))
	for i := 0; i < len(jobs); i += 10 {
		<-pace.C
		for _, j := range jobs[i:min(i+10, len(jobs))] {
			next <- j
		}
	}
	pace.Stop()
	close(next)
	wg.Wait()
}

func (r *chaosRun) submitOne(api *client.Client, j chaosJob) {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := api.Submit(context.Background(), client.SubmitRequest{
			JobID: j.id, Type: j.typ, Agent: "chaos", Payload: []byte(j.payload),
		})
		if err == nil {
			return
		}
		var apiErr *client.APIError
		permanent := errors.As(err, &apiErr) && !apiErr.Temporary()
		if permanent || time.Now().After(deadline) {
			r.mu.Lock()
			r.submitErrs = append(r.submitErrs, fmt.Errorf("submit %s: %w", j.id, err))
			r.mu.Unlock()
			return
		}
		r.submitRetries.Add(1)
		time.Sleep(100 * time.Millisecond) // retry pace of a client, not synchronisation
	}
}

func (r *chaosRun) submitErrors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.submitErrs
}

// verify checks the end state of every job, the audit, the DLQ stream, the stream groups and
// the leases.
func (r *chaosRun) verify(jobs []chaosJob) {
	t, c := r.t, r.c
	type row struct {
		status               string
		attempts, maxAttempt int
	}
	got := map[string]row{}
	rows, err := c.db.Query(`SELECT job_id, status, attempts, max_attempts FROM orchestrator_jobs`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var rw row
		require.NoError(t, rows.Scan(&id, &rw.status, &rw.attempts, &rw.maxAttempt))
		got[id] = rw
	}
	require.NoError(t, rows.Close())
	require.Len(t, got, len(jobs), "one row per submitted job")

	done := c.doneAuditCounts()
	var doomed []string
	for _, j := range jobs {
		rw, ok := got[j.id]
		require.True(t, ok, "job %s lost", j.id)
		switch j.typ {
		case "doomed":
			doomed = append(doomed, j.id)
			require.Equal(t, "dead_letter", rw.status, "job %s: audit %v", j.id, c.auditTrail(j.id))
			require.Equal(t, doomedAttempts, rw.attempts, "job %s: audit %v", j.id, c.auditTrail(j.id))
			require.Zero(t, done[j.id], "dead letter %s went running->done", j.id)
		default:
			require.Equal(t, "done", rw.status, "job %s: audit %v", j.id, c.auditTrail(j.id))
			require.Equal(t, 1, done[j.id], "job %s: running->done %d times; audit %v", j.id, done[j.id], c.auditTrail(j.id))
			if j.typ == "flaky" {
				require.GreaterOrEqual(t, rw.attempts, 2, "flaky job %s failed its first run", j.id)
			}
		}
	}

	// Every dead letter is on the DLQ stream (the relay republishes those the wipe took).
	require.Eventually(t, func() bool {
		on := map[string]bool{}
		after := ""
		for {
			dls, err := c.streams.ListDeadLetters(context.Background(), after, 1000)
			if err != nil {
				return false
			}
			for _, d := range dls {
				on[d.JobID] = true
			}
			if len(dls) < 1000 {
				break
			}
			after = dls[len(dls)-1].ID
		}
		for _, id := range doomed {
			if !on[id] {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "dead letters missing from the DLQ stream")

	require.Eventually(t, func() bool { return c.pendingEntries(chaosStreams) == 0 },
		30*time.Second, 100*time.Millisecond, "stream entries left unacknowledged")
	require.Eventually(t, func() bool {
		var n int
		return c.db.QueryRow(`SELECT COUNT(*) FROM orchestrator_leases WHERE status = 'active'`).Scan(&n) == nil && n == 0
	}, 30*time.Second, 100*time.Millisecond, "leases left active")
	require.Empty(t, r.crashed, "processes that exited on their own")
}

// logFigures logs what the faults did: attempts, rescues, elections, reclaims, recoveries.
func (r *chaosRun) logFigures(took time.Duration) {
	t, c := r.t, r.c
	q := func(query string) map[string]int {
		out := map[string]int{}
		rows, err := c.db.Query(query)
		if err != nil {
			return map[string]int{"error: " + err.Error(): 1}
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int
			if rows.Scan(&k, &n) == nil {
				out[k] = n
			}
		}
		return out
	}
	t.Logf("chaos run: %s in all, worker incarnations %v", took.Round(time.Millisecond), r.starts)
	t.Logf("attempts by type: %v", q(`SELECT CONCAT(type, ':', attempts), COUNT(*) FROM orchestrator_jobs GROUP BY type, attempts`))
	t.Logf("failed attempts by error: %v", q(`SELECT LEFT(COALESCE(JSON_VALUE(details, '$.error'), '?'), 60), COUNT(*)
		FROM orchestrator_audit WHERE event_type LIKE 'job.%->failed' GROUP BY 1`))
	t.Logf("leadership and leases: %v", q(`SELECT event_type, COUNT(*) FROM orchestrator_audit
		WHERE event_type LIKE 'leader.%' OR event_type LIKE 'lease.%' GROUP BY event_type`))
	keys := make([]string, 0, len(r.reclaims))
	for k := range r.reclaims {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("  %s %v", k, r.reclaims[k])
	}
	t.Logf("submits retried: %d", r.submitRetries.Load())
	r.logEvents()
}

// logEvents logs the orchestrators' elections, lost leaderships and Redis recoveries, and counts
// the reclaimer's rescues and the workers' NOGROUP errors (the groups re-created after the wipe).
func (r *chaosRun) logEvents() {
	t, c := r.t, r.c
	logs, _ := filepath.Glob(filepath.Join(c.dir, "orchestrator-*.log"))
	rescued := 0
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.Contains(line, "rescued a job whose worker is gone"):
				rescued++
			case strings.Contains(line, "redis recovered"), strings.Contains(line, "redis lost data"),
				strings.Contains(line, "recover redis"), strings.Contains(line, "lost leadership"),
				strings.Contains(line, "elected leader"):
				t.Logf("  %s: %s", filepath.Base(l), line)
			}
		}
	}
	t.Logf("jobs rescued by the reclaimer (stream entry idle, lease expired): %d", rescued)
	logs, _ = filepath.Glob(filepath.Join(c.dir, "worker-*.log"))
	noGroup := 0
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		noGroup += strings.Count(string(b), "NOGROUP")
	}
	t.Logf("worker log lines about NOGROUP (groups re-created after the wipe): %d", noGroup)
}

// lastLines returns the last n lines of p's log.
func lastLines(p *proc, n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
