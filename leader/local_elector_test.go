package leader_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/store"
)

// newLocal returns a LocalElector on dir, stopped at cleanup, and its recorder.
func newLocal(t *testing.T, dir string, st store.Store, id string) (*leader.LocalElector, *recorder) {
	t.Helper()
	rec := newRecorder()
	e, err := leader.NewLocal(dir, st, leader.Config{
		ID: id, Interval: testInterval, OnElected: rec.onElected, Logger: testLogger(t),
	})
	require.NoError(t, err)
	t.Cleanup(e.Stop)
	return e, rec
}

func TestLocalElector(t *testing.T) {
	t.Parallel()

	t.Run("LeadsFromStartToStop", func(t *testing.T) {
		t.Parallel()
		st := testenv.MySQLStore(t)
		dir := filepath.Join(t.TempDir(), "data") // created by Start
		e, rec := newLocal(t, dir, st, "local")
		e.Stop() // safe before Start

		require.NoError(t, e.Start(t.Context()))
		require.True(t, e.IsLeader(), "a started local elector leads at once")
		require.EqualValues(t, 1, e.Term())
		el := rec.next(t)
		require.EqualValues(t, 1, el.term)
		require.NoError(t, el.ctx.Err())
		require.NoError(t, e.Start(t.Context()), "starting again does nothing")
		rec.requireNone(t)

		raw, err := os.ReadFile(filepath.Join(dir, leader.LockFileName))
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(os.Getpid()), strings.TrimSpace(string(raw)))
		ls, err := e.Leader(t.Context())
		require.NoError(t, err)
		require.Equal(t, "local", ls.LeaderID)

		e.Stop()
		require.Error(t, el.ctx.Err())
		requireClosed(t, el.returned, "Stop returns after OnElected")
		require.False(t, e.IsLeader())
		require.Zero(t, e.Term())
		e.Stop()
	})

	t.Run("SecondOnSameDirFails", func(t *testing.T) {
		t.Parallel()
		st := testenv.MySQLStore(t)
		dir := t.TempDir()
		first, _ := newLocal(t, dir, st, "first")
		require.NoError(t, first.Start(t.Context()))

		second, rec := newLocal(t, dir, st, "second")
		err := second.Start(t.Context())
		require.ErrorIs(t, err, leader.ErrDataDirInUse)
		require.ErrorContains(t, err, "another orchestrator is using data directory "+dir+
			" (pid "+strconv.Itoa(os.Getpid())+")")
		require.False(t, second.IsLeader())
		second.Stop() // nothing to stop

		// Once the first stops, the lock is free.
		first.Stop()
		require.NoError(t, second.Start(t.Context()))
		require.EqualValues(t, 2, rec.next(t).term)
		require.True(t, second.IsLeader())
	})

	t.Run("StepsDownWhenTermMovesOn", func(t *testing.T) {
		t.Parallel()
		st := testenv.MySQLStore(t)
		e, rec := newLocal(t, t.TempDir(), st, "local")
		require.NoError(t, e.Start(t.Context()))
		first := rec.next(t)

		intruder, err := st.LeaderAcquire(t.Context(), "intruder", time.Now())
		require.NoError(t, err)
		require.EqualValues(t, 2, intruder)
		requireDone(t, first.ctx, "a fenced renewal ends leadership")
		requireClosed(t, first.returned, "OnElected returned")
		second := rec.next(t)
		require.EqualValues(t, 3, second.term, "the local elector leads again with a newer term")
		require.Eventually(t, func() bool { return e.Term() == 3 }, waitMax, time.Millisecond)
	})

	t.Run("Validates", func(t *testing.T) {
		t.Parallel()
		st := testenv.MySQLStore(t)
		_, err := leader.NewLocal("", st, leader.Config{})
		require.Error(t, err)
		_, err = leader.NewLocal(t.TempDir(), st, leader.Config{Interval: -time.Second})
		require.ErrorContains(t, err, "invalid leader config")
	})
}
