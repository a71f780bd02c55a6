package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/mysql"
	"github.com/gpuorch/orchestrator/store/sqlite"
)

// TestJobsDB: the bench reads the same figures from MariaDB and from the embedded mode's
// SQLite file, where times are kept differently (DATETIME(6) against microseconds) and LIKE
// has no default escape character.
func TestJobsDB(t *testing.T) {
	t.Parallel()
	t.Run("MariaDB", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.MySQLDSN(t)
		st, err := mysql.Open(t.Context(), dsn, mysql.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		reader, err := openDB(dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = reader.Close() })
		checkJobsDB(t, st, jobsDB{db: reader, jobType: "noop", noHint: new(atomic.Bool)})
	})
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), sqlite.DBFileName)
		_, _, err := db.MigrateSQLite(t.Context(), path, db.CmdUp, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		reader, err := openSQLite(path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = reader.Close() })
		checkJobsDB(t, st, jobsDB{db: reader, jobType: "noop", sqlite: true, noHint: new(atomic.Bool)})
	})
}

// checkJobsDB writes jobs through st and checks what j reads of them.
func checkJobsDB(t *testing.T, st store.Store, j jobsDB) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// Two done jobs of the scenario b_x-lat- (created, started, finished in ms after t0), a
	// pending one, and a done one that only a LIKE without its escape would count: _ matches
	// any character.
	for _, job := range []struct {
		id                  string
		done                bool
		created, start, fin int
	}{
		{"b_x-lat-0000001", true, 0, 3, 7},
		{"b_x-lat-0000002", true, 10, 12, 20},
		{"b_x-lat-0000003", false, 15, 0, 0},
		{"bax-lat-0000004", true, 1, 2, 3},
	} {
		_, _, err := st.JobInsert(ctx, store.JobInsertParams{ID: job.id, Type: "noop", Agent: "bench",
			MaxAttempts: 1, Now: ms(job.created)})
		require.NoError(t, err)
		if job.done {
			started, finished := ms(job.start), ms(job.fin)
			require.NoError(t, st.JobUpdate(ctx, store.JobUpdate{ID: job.id, From: store.JobPending, To: store.JobDone,
				StartedAt: &started, FinishedAt: &finished, Now: finished}))
		}
	}

	w, err := j.window(ctx, "b_x-lat-")
	require.NoError(t, err)
	require.Equal(t, doneWindow{Jobs: 2, FirstCreated: ms(0), FirstStarted: ms(3), FirstFinished: ms(7), LastFinished: ms(20)}, w)

	start, done, err := j.latencies(ctx, "b_x-lat-")
	require.NoError(t, err)
	slices.Sort(start)
	slices.Sort(done)
	require.Equal(t, []time.Duration{2 * time.Millisecond, 3 * time.Millisecond}, start)
	require.Equal(t, []time.Duration{7 * time.Millisecond, 10 * time.Millisecond}, done)

	terminal, err := j.terminalCounts(ctx, "b_x-lat-")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"done": 2}, terminal)
	require.False(t, j.noHint.Load(), "the index hint is spelled right")
	all, err := j.statusCounts(ctx, "b_x-lat-")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"done": 2, "pending": 1}, all)
}
