package api

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/mysql"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/wire"
)

// TestLeaseGrantsNeverOvercommit sends 200 concurrent lease requests of random sizes for one
// node with two 24 GiB GPUs through two orchestrator instances (two API servers, each with its
// own engine and connection pool, on one database). After every grant the active reservations
// of each GPU must be within its capacity minus the safety margin; every denial must say why.
// Half of the grants are released again at once, so capacity keeps coming back.
func TestLeaseGrantsNeverOvercommit(t *testing.T) {
	t.Parallel()
	const (
		requests = 200
		node     = "gpu-node"
		gpuMB    = 24576
	)
	dsn := testenv.MySQLDSN(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	var (
		clients [2]*client.Client
		st      store.Store
	)
	for i := range clients {
		s, err := mysql.Open(t.Context(), dsn, mysql.Options{MaxOpenConns: 20})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		cfg := testConfig(t)
		sb := newStack(s, sc, cfg, engine.Options{Logger: slog.New(slog.DiscardHandler)})
		set, tokens := testTokens(t)
		srv := httptest.NewServer(New(sb.with(Options{Auth: AuthOptions{Tokens: set},
			Logger: slog.New(slog.DiscardHandler)})).Handler())
		t.Cleanup(srv.Close)
		clients[i] = client.New(srv.URL, tokens["alice"])
		if i == 0 {
			st = s
			require.NoError(t, sb.lm.RecordSnapshot(t.Context(), telemetry.Snapshot{
				NodeID: node, Source: telemetry.SourceSimulated, GPUs: []telemetry.GPU{
					{Index: 0, UUID: "GPU-0", MemoryTotalMB: gpuMB}, {Index: 1, UUID: "GPU-1", MemoryTotalMB: gpuMB},
				}}))
		}
	}
	margin := testConfig(t).Leases.SafetyMarginMB
	capacity := gpuMB - margin

	checkInvariant := func() error {
		gpus, err := st.GPUList(context.Background(), node)
		if err != nil {
			return err
		}
		for _, g := range gpus {
			if g.ReservedMB > capacity {
				return errors.New("gpu over-committed")
			}
		}
		return nil
	}

	var (
		wg              sync.WaitGroup
		granted, denied atomic.Int64
		maxSeen         [2]atomic.Int64
		start           = make(chan struct{})
		errs            = make(chan error, requests)
	)
	for i := range requests {
		wg.Go(func() {
			<-start
			c := clients[i%2]
			size := 1000 + rand.Int64N(15000)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g, err := c.GrantLease(ctx, wire.LeaseRequest{NodeID: node, MinMemoryMB: size, TTLSeconds: 300})
			var apiErr *client.APIError
			switch {
			case errors.As(err, &apiErr):
				denied.Add(1)
				if apiErr.StatusCode != http.StatusConflict || apiErr.Code != wire.CodeNoCapacity || apiErr.Message == "" {
					errs <- err
				}
				return
			case err != nil:
				errs <- err
				return
			}
			granted.Add(1)
			if g.MemoryMB != size || g.GPUIndex == nil {
				errs <- errors.New("grant does not match the request")
			}
			gpus, err := st.GPUList(ctx, node)
			if err != nil {
				errs <- err
				return
			}
			for _, gpu := range gpus {
				for {
					seen := maxSeen[gpu.Index].Load()
					if gpu.ReservedMB <= seen || maxSeen[gpu.Index].CompareAndSwap(seen, gpu.ReservedMB) {
						break
					}
				}
			}
			if err := checkInvariant(); err != nil {
				errs <- err
			}
			if i%2 == 0 {
				if _, err := c.ReleaseLease(ctx, g.Token); err != nil {
					errs <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, requests, granted.Load()+denied.Load())
	require.Positive(t, granted.Load())
	require.Positive(t, denied.Load(), "two GPUs cannot hold 200 leases of up to 16 GB")
	require.NoError(t, checkInvariant())
	for i := range maxSeen {
		require.LessOrEqual(t, maxSeen[i].Load(), capacity)
		require.Greater(t, maxSeen[i].Load(), capacity/2, "GPU %d was used", i)
	}
	t.Logf("granted %d, denied %d, peak reservations %d and %d MB of %d", granted.Load(), denied.Load(),
		maxSeen[0].Load(), maxSeen[1].Load(), capacity)
}
