package pools

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// bundle is a pools service on a fresh database and Redis prefix, with an engine (for jobs and
// rescues) and a fake provisioner, all on one test clock.
type bundle struct {
	st    store.Store
	sc    *streams.Client
	cfg   *config.Config
	svc   *Service
	eng   *engine.Engine
	clock *clock
	prov  *fakeProvisioner
}

func setup(t *testing.T) *bundle {
	t.Helper()
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	c := &clock{t: time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)}
	log := slog.New(slog.DiscardHandler)
	return &bundle{
		st: st, sc: sc, cfg: cfg, clock: c, prov: newFakeProvisioner(c),
		svc: NewService(st, sc, cfg, ServiceOptions{Now: c.Now, Logger: log}),
		eng: engine.New(st, sc, cfg, engine.Options{Now: c.Now, Logger: log}),
	}
}

// reconciler returns a reconciler on the bundle's clock and fake provisioner, with short,
// distinct graces: offline after 15s, drain grace 60s, evict grace 5s, start timeout 30s.
func (b *bundle) reconciler() *Reconciler {
	return NewReconciler(b.st, b.prov, b.eng, ReconcilerConfig{
		OfflineAfter: 15 * time.Second, DrainGrace: time.Minute, EvictGrace: 5 * time.Second,
		StartTimeout: 30 * time.Second, Logger: slog.New(slog.DiscardHandler), Now: b.clock.Now,
	})
}

// createPool creates a pool of the noop type.
func (b *bundle) createPool(t *testing.T, id string, desired, hold int) store.Pool {
	t.Helper()
	res, err := b.svc.CreatePool(t.Context(), CreateParams{PoolID: id, Agent: "chat", ModelID: "mistral-7b",
		Adapter: "vllm", Types: []string{"noop"}, DesiredWorkers: desired, HoldSeconds: hold, Actor: "admin:test"})
	require.NoError(t, err)
	return res.Pool
}

// register registers a worker of the pool.
func (b *bundle) register(t *testing.T, id, pool string) Instruction {
	t.Helper()
	in, err := b.svc.RegisterWorker(t.Context(), RegisterParams{WorkerID: id, PoolID: pool, NodeID: "node-1",
		Hostname: "host", PID: 1234, Types: []string{"noop"}, Concurrency: 4})
	require.NoError(t, err)
	return in
}

// beat sends a heartbeat.
func (b *bundle) beat(t *testing.T, id string, status store.WorkerStatus, inFlight int, claimed int64) Instruction {
	t.Helper()
	in, err := b.svc.HeartbeatWorker(t.Context(), HeartbeatParams{WorkerID: id, Status: status, InFlight: inFlight, JobsClaimed: claimed})
	require.NoError(t, err)
	return in
}

func (b *bundle) pool(t *testing.T, id string) store.Pool {
	t.Helper()
	p, err := b.st.PoolGet(t.Context(), id, false)
	require.NoError(t, err)
	return p
}

func (b *bundle) worker(t *testing.T, id string) store.Worker {
	t.Helper()
	w, err := b.st.WorkerGet(t.Context(), id, false)
	require.NoError(t, err)
	return w
}

// auditTypes returns the event types of the audit rows of a pool, in order.
func (b *bundle) auditTypes(t *testing.T, poolID string) []string {
	t.Helper()
	evs, err := b.st.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
	require.NoError(t, err)
	var out []string
	for _, ev := range evs {
		if ev.PoolID == poolID {
			out = append(out, ev.EventType)
		}
	}
	return out
}

// runOnce runs one pass, requiring success.
func runOnce(t *testing.T, r *Reconciler) ReconcileResult {
	t.Helper()
	res, err := r.runOnce(t.Context())
	require.NoError(t, err)
	return res
}

// fakeProvisioner is an in-memory Provisioner: processes are records, exits are what the test
// says.
type fakeProvisioner struct {
	mu      sync.Mutex
	clock   *clock
	managed bool
	procs   map[string]*Process
	exits   []Exit
	started []WorkerSpec
	stopped []string
	killed  []string
	backoff bool // Start refuses with ErrBackingOff
}

func newFakeProvisioner(c *clock) *fakeProvisioner {
	return &fakeProvisioner{clock: c, managed: true, procs: map[string]*Process{}}
}

func (f *fakeProvisioner) Name() string  { return "fake" }
func (f *fakeProvisioner) Managed() bool { return f.managed }

func (f *fakeProvisioner) Running(poolID string) []Process {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Process
	for _, p := range f.procs {
		if p.PoolID == poolID {
			out = append(out, *p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].WorkerID < out[j].WorkerID })
	return out
}

func (f *fakeProvisioner) Start(_ context.Context, spec WorkerSpec) (Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.managed {
		return Process{}, ErrNotManaged
	}
	if f.backoff {
		return Process{}, fmt.Errorf("fake: %w", ErrBackingOff)
	}
	p := &Process{WorkerID: spec.WorkerID, PoolID: spec.PoolID, PID: 1000 + len(f.started), StartedAt: f.clock.Now()}
	f.procs[spec.WorkerID] = p
	f.started = append(f.started, spec)
	return *p, nil
}

func (f *fakeProvisioner) Stop(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.procs[id]; p != nil && p.StopRequestedAt.IsZero() {
		p.StopRequestedAt = f.clock.Now()
	}
	f.stopped = append(f.stopped, id)
	return nil
}

func (f *fakeProvisioner) Kill(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, id)
	if p := f.procs[id]; p != nil {
		if p.StopRequestedAt.IsZero() {
			p.StopRequestedAt = f.clock.Now()
		}
		f.exitLocked(id, -1, "killed")
	}
	return nil
}

// exit ends a process as the OS would: code -1 with a signal, or a status.
func (f *fakeProvisioner) exit(id string, code int, signal string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exitLocked(id, code, signal)
}

func (f *fakeProvisioner) exitLocked(id string, code int, signal string) {
	p := f.procs[id]
	delete(f.procs, id)
	f.exits = append(f.exits, Exit{Process: *p, Code: code, Signal: signal, At: f.clock.Now(),
		Crashed: p.StopRequestedAt.IsZero() && code != 0})
}

func (f *fakeProvisioner) Exited() []Exit {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.exits
	f.exits = nil
	return out
}

// startedIDs returns the worker ids started so far for the pool.
func (f *fakeProvisioner) startedIDs(poolID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, s := range f.started {
		if s.PoolID == poolID {
			out = append(out, s.WorkerID)
		}
	}
	return out
}

func (f *fakeProvisioner) counts() (started, stopped, killed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started), len(f.stopped), len(f.killed)
}
