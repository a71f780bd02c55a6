package schedules_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/schedules"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/streams"
)

// clock is a clock the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// bundle is an engine, a schedules service and a firer over real backends, on one clock.
type bundle struct {
	st      store.Store
	sc      *streams.Client
	cfg     *config.Config
	eng     *engine.Engine
	svc     *schedules.Service
	firer   *schedules.Firer
	metrics *schedules.Metrics
	reg     *prometheus.Registry // metrics, registered
	clock   *clock
}

// start is where every test's clock starts: a whole minute, so that fire times are easy to
// name.
var start = time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)

// onBothStores runs test as parallel subtests on MariaDB and on the embedded mode's SQLite.
func onBothStores(t *testing.T, test func(t *testing.T, b *bundle)) {
	t.Helper()
	for name, open := range map[string]func(testing.TB) store.Store{"MariaDB": testenv.MySQLStore, "SQLite": openSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newBundle(t, open(t)))
		})
	}
}

// openSQLite is a migrated SQLite store in a temporary directory.
func openSQLite(t testing.TB) store.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), sqlite.DBFileName)
	_, _, err := db.MigrateSQLite(context.Background(), path, db.CmdUp, nil)
	require.NoError(t, err)
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "OFF"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func newBundle(t *testing.T, st store.Store) *bundle {
	t.Helper()
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	ck := &clock{now: start}
	log := slog.New(slog.DiscardHandler)
	lm := engine.NewLeaseManager(st, cfg, leases.Options{Now: ck.Now, Logger: log})
	eng := engine.New(st, sc, cfg, engine.Options{Now: ck.Now, Leases: lm, Logger: log})
	t.Cleanup(func() { eng.FlushMarks(context.Background()) }) // before the store closes
	b := &bundle{st: st, sc: sc, cfg: cfg, eng: eng, clock: ck, metrics: schedules.NewMetrics(), reg: prometheus.NewRegistry()}
	require.NoError(t, b.reg.Register(b.metrics))
	b.svc = schedules.NewService(st, eng, cfg, ck.Now)
	b.firer = b.newFirer(nil)
	return b
}

// newFirer is a firer of the bundle behind fence.
func (b *bundle) newFirer(fence engine.Fence) *schedules.Firer {
	return schedules.NewFirer(b.st, b.eng, schedules.FirerConfigFrom(b.cfg, schedules.FirerConfig{
		Fence: fence, Metrics: b.metrics, Clock: b.clock.Now, Logger: slog.New(slog.DiscardHandler)}))
}

// spec is a schedule of noop jobs for agent "tester".
func spec(id, cron string) schedules.Spec {
	return schedules.Spec{ID: id, Cron: cron, Job: schedules.JobTemplate{Type: "noop", Agent: "tester",
		Payload: json.RawMessage(`{"from":"` + id + `"}`)}}
}

// create creates sp at the clock's now.
func (b *bundle) create(t *testing.T, sp schedules.Spec) schedules.View {
	t.Helper()
	v, err := b.svc.Create(context.Background(), sp, "admin")
	require.NoError(t, err)
	return v
}

// pass runs one firer pass at the clock's now.
func (b *bundle) pass(t *testing.T) schedules.Result {
	t.Helper()
	res, err := b.firer.RunOnce(context.Background())
	require.NoError(t, err)
	return res
}

// at is the test's start plus d.
func at(d time.Duration) time.Time { return start.Add(d) }

// fires returns the schedule's fires, oldest first.
func (b *bundle) fires(t *testing.T, id string) []store.ScheduleFire {
	t.Helper()
	fs, err := b.st.ScheduleFireList(context.Background(), store.ScheduleFireListParams{ScheduleID: id, Limit: 1000})
	require.NoError(t, err)
	return fs
}

// firedAt returns the fire times of the schedule's fires that made a job.
func (b *bundle) firedAt(t *testing.T, id string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, f := range b.fires(t, id) {
		if f.State == store.FireRunning || f.State == store.FireEnded {
			out = append(out, f.FireTime)
		}
	}
	return out
}

// audit returns the audit rows of type typ whose details name schedule id.
func (b *bundle) audit(t *testing.T, typ, id string) []map[string]any {
	t.Helper()
	evs, err := b.st.AuditList(context.Background(), store.AuditListParams{Limit: 1000})
	require.NoError(t, err)
	var out []map[string]any
	for _, ev := range evs {
		if ev.EventType != typ {
			continue
		}
		var d map[string]any
		require.NoError(t, json.Unmarshal(ev.Details, &d))
		if d["schedule_id"] == id {
			d["actor"], d["row_job_id"] = ev.Actor, ev.JobID
			out = append(out, d)
		}
	}
	return out
}

// jobs returns the jobs of agent "tester".
func (b *bundle) jobs(t *testing.T) []store.Job {
	t.Helper()
	js, err := b.st.JobList(context.Background(), store.JobListParams{Agent: "tester", Limit: 1000})
	require.NoError(t, err)
	return js
}

// end moves a pending job to status (a worker's completion, or an operator's cancel, in
// short: the firer reads only the status).
func (b *bundle) end(t *testing.T, jobID string, status store.JobStatus) {
	t.Helper()
	require.NoError(t, b.st.JobUpdate(context.Background(), store.JobUpdate{ID: jobID, From: store.JobPending, To: status,
		Now: b.clock.Now()}))
}
