package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/admission"
	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/streams"
)

// opsBundle is a real orchestrator API with everything the operator commands reach: the pools
// service with a running reconciler (external provisioner: workers are whoever registers),
// admission control, and an admin client for arranging state through the API.
type opsBundle struct {
	*bundle
	svc *pools.Service
	adm *admission.Controller
	api *client.Client // admin
}

// setupOps builds the bundle on a fresh MariaDB database and Redis prefix.
func setupOps(t *testing.T) *opsBundle {
	t.Helper()
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testenv.RedisPrefix(t)
	sc := streams.New(rdb, streams.Options{Prefix: prefix})
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	opts := apiOptions(st, sc, cfg, log)
	eng := opts.Engine

	svc := pools.NewService(st, sc, cfg, pools.ServiceOptions{Logger: log})
	rec := pools.NewReconciler(st, pools.ExternalProvisioner{}, eng, pools.ReconcilerConfig{
		Interval: 50 * time.Millisecond, OfflineAfter: time.Minute, Logger: log})
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, rec.Start(ctx))
	svc.SetWaker(rec.Wake)
	t.Cleanup(func() { cancel(); rec.Stop() })

	adm, err := admission.New(st, rdb, cfg, admission.Options{Prefix: prefix, Registerer: prometheus.NewRegistry(), Logger: log})
	require.NoError(t, err)
	require.NoError(t, adm.Start(ctx))
	t.Cleanup(adm.Stop)

	admin, adminLine, err := api.GenerateToken(string(api.RoleAdmin), "")
	require.NoError(t, err)
	alice, aliceLine, err := api.GenerateToken(string(api.RoleAgent), "alice")
	require.NoError(t, err)
	tokens, err := api.LoadTokens("", adminLine+";"+aliceLine)
	require.NoError(t, err)
	opts.Auth, opts.Pools, opts.Admission = api.AuthOptions{Tokens: tokens}, svc, adm
	ts := httptest.NewServer(api.New(opts).Handler())
	t.Cleanup(ts.Close)
	return &opsBundle{
		bundle: &bundle{url: ts.URL, admin: admin, alice: alice, eng: eng, st: st, opts: opts},
		svc:    svc, adm: adm, api: client.New(ts.URL, admin),
	}
}

// reportGPUs records telemetry of node with one 24 GiB GPU per index, as a worker's lease
// renewal would.
func (b *opsBundle) reportGPUs(t *testing.T, node string, indexes ...int) {
	t.Helper()
	tel := &client.NodeTelemetry{NodeID: node, Taken: time.Now(), Source: "simulated"}
	for _, i := range indexes {
		tel.GPUs = append(tel.GPUs, client.GPUTelemetry{Index: i, UUID: node + "-gpu-" + strconv.Itoa(i),
			Name: "SimGPU", MemoryTotalMB: 24576})
	}
	_, err := b.api.RenewLeases(t.Context(), client.RenewRequest{WorkerID: "telemetry-" + node, NodeID: node, Telemetry: tel})
	require.NoError(t, err)
}

// grant takes an agent's own GPU lease of mb on node.
func (b *opsBundle) grant(t *testing.T, agent, node string, mb int64) client.LeaseGrant {
	t.Helper()
	g, err := b.api.GrantLease(t.Context(), client.LeaseRequest{Agent: agent, NodeID: node, MinMemoryMB: mb, Mode: client.LeaseModeGPU})
	require.NoError(t, err)
	return g
}

// createPool creates a pool of the noop type wanting desired workers.
func (b *opsBundle) createPool(t *testing.T, id string, desired int) {
	t.Helper()
	_, err := b.api.CreatePool(t.Context(), client.PoolRequest{PoolID: id, AgentName: "alice", ModelID: "m",
		Types: []string{"noop"}, DesiredWorkers: desired})
	require.NoError(t, err)
}

// register registers a worker of pool (it never heartbeats again within a test).
func (b *opsBundle) register(t *testing.T, workerID, pool string) {
	t.Helper()
	_, err := b.api.RegisterWorker(t.Context(), client.RegisterWorkerRequest{WorkerID: workerID, PoolID: pool,
		NodeID: "n1", Types: []string{"noop"}, Concurrency: 1})
	require.NoError(t, err)
}

// registerSeen registers a worker of a pool wanting one and waits until the reconciler has seen
// it (the pool is running). A pass reads the workers before the pools, so a drain issued
// before that could meet a pass that read the workers before the registration.
func (b *opsBundle) registerSeen(t *testing.T, workerID, pool string) {
	t.Helper()
	b.register(t, workerID, pool)
	b.waitPool(t, pool, func(p client.Pool) bool { return p.Status == client.PoolRunning })
}

// pool reads a pool through the API.
func (b *opsBundle) pool(t *testing.T, id string) client.Pool {
	t.Helper()
	p, err := b.api.GetPool(t.Context(), id)
	require.NoError(t, err)
	return p
}

// waitPool polls a pool until cond holds.
func (b *opsBundle) waitPool(t *testing.T, id string, cond func(client.Pool) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		p, err := b.api.GetPool(context.Background(), id)
		return err == nil && cond(p)
	}, 30*time.Second, 10*time.Millisecond, "pool %s never reached the state", id)
}

// itoa is strconv.Itoa, for building arguments.
func itoa(i int) string { return strconv.Itoa(i) }
