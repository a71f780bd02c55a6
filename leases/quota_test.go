package leases_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/sqlite"
)

// quotaStores open a fresh store of each backend: MariaDB, and the embedded mode's SQLite.
var quotaStores = map[string]func(t *testing.T) store.Store{
	"MariaDB": func(t *testing.T) store.Store { return testenv.MySQLStore(t) },
	"SQLite": func(t *testing.T) store.Store {
		path := filepath.Join(t.TempDir(), sqlite.DBFileName)
		_, _, err := db.MigrateSQLite(t.Context(), path, db.CmdUp, nil)
		require.NoError(t, err)
		st, err := sqlite.Open(t.Context(), path, sqlite.Options{Synchronous: "OFF"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
}

// TestGrantQuota: a gpu lease that would take its agent past its GPU quota is refused with a
// *QuotaError naming the limit and the holding, whichever node it asks for; cpu leases and
// other agents are not limited; a release makes room; concurrent grants of one agent on two
// nodes cannot both pass; an exclusive lease counts the whole GPU it reserves.
func TestGrantQuota(t *testing.T) {
	t.Parallel()
	for name, open := range quotaStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ck := &clock{now: time.Now().UTC().Truncate(time.Second)}
			quotas := map[string]leases.Quota{"a": {MaxGPUs: 1}, "c": {MaxMemoryMB: 20000}}
			m, err := leases.New(open(t), leases.Config{}, leases.Options{Now: ck.Now, Logger: slog.New(slog.DiscardHandler),
				NodeID: "n1", Quotas: func(agent string) (int64, int) { return quotas[agent].MaxMemoryMB, quotas[agent].MaxGPUs }})
			require.NoError(t, err)
			b := &bundle{m: m, clock: ck}
			b.simulate(t, "n1", "40960")
			b.simulate(t, "n2", "40960")
			b.simulate(t, "n3", "40960") // idle for c's exclusive lease

			first, err := m.Grant(ctx, gpuParams("a", "n1", 1000))
			require.NoError(t, err)
			_, err = m.Grant(ctx, gpuParams("a", "n2", 1000))
			var qe *leases.QuotaError
			require.ErrorAs(t, err, &qe)
			require.Equal(t, `agent "a" holds 1 of 1 GPU(s) (max_gpus); this lease needs 1`, qe.Message)
			require.Equal(t, leases.QuotaRetryAfter, qe.RetryAfter)
			_, err = m.Grant(ctx, leases.GrantParams{Agent: "a", Mode: store.LeaseCPU, Actor: "agent:a"})
			require.NoError(t, err, "cpu leases hold no GPU")
			_, err = m.Grant(ctx, gpuParams("b", "n1", 1000))
			require.NoError(t, err, "another agent is not limited")

			_, err = m.Release(ctx, first.Token, "a", "agent:a")
			require.NoError(t, err)
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				granted int
			)
			for i := range 8 {
				wg.Go(func() {
					_, err := m.Grant(ctx, gpuParams("a", []string{"n1", "n2"}[i%2], 1000))
					mu.Lock()
					defer mu.Unlock()
					if err == nil {
						granted++
					} else if !errors.As(err, new(*leases.QuotaError)) {
						t.Errorf("grant %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			require.Equal(t, 1, granted, "concurrent grants on two nodes: one within the quota")

			excl := gpuParams("c", "n3", 1000)
			excl.Exclusive = true
			_, err = m.Grant(ctx, excl)
			require.ErrorAs(t, err, &qe)
			require.Contains(t, qe.Message, `agent "c" holds 0 of 20000 MB of GPU memory (max_gpu_memory_mb); this lease needs`)
			_, err = m.Grant(ctx, gpuParams("c", "n3", 20000))
			require.NoError(t, err, "up to the quota exactly")
		})
	}
}
