package sqlgen

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

var enc = Encoding{Time: func(t time.Time) any { return t.UnixMicro() }}

func TestJobUpdatesGroupsByShape(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	w := "w1"
	us := []store.JobUpdate{
		{ID: "b", From: store.JobPending, To: store.JobClaimed, Attempts: new(2), WorkerID: &w, Now: now},
		{ID: "x", From: store.JobPending, To: store.JobCancelled, Now: now},
		{ID: "a", From: store.JobPending, To: store.JobClaimed, Attempts: new(1), WorkerID: &w, Now: now},
	}
	stmts, err := JobUpdates(us, enc, 500)
	require.NoError(t, err)
	require.Len(t, stmts, 2, "one statement per shape")

	claim := stmts[0]
	require.Equal(t, 2, claim.Rows)
	require.Equal(t, "UPDATE orchestrator_jobs SET status = ?, updated_at = ?, "+
		"attempts = CASE job_id WHEN ? THEN ? WHEN ? THEN ? END, worker_id = ? "+
		"WHERE job_id IN (?, ?) AND status = ?", claim.SQL)
	require.Equal(t, []any{"claimed", now.UnixMicro(), "a", 1, "b", 2, "w1", "a", "b", "pending"}, claim.Args,
		"rows in key order; shared values are one parameter")

	cancel := stmts[1]
	require.Equal(t, 1, cancel.Rows)
	require.Equal(t, "UPDATE orchestrator_jobs SET status = ?, updated_at = ? WHERE job_id = ? AND status = ?", cancel.SQL)
}

func TestJobUpdatesChunksAndRefusesRepeats(t *testing.T) {
	t.Parallel()
	var us []store.JobUpdate
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		us = append(us, store.JobUpdate{ID: id, From: store.JobClaimed, To: store.JobRunning})
	}
	stmts, err := JobUpdates(us, enc, 2)
	require.NoError(t, err)
	require.Len(t, stmts, 3)
	require.Equal(t, []int{2, 2, 1}, []int{stmts[0].Rows, stmts[1].Rows, stmts[2].Rows})

	_, err = JobUpdates(append(us, us[0]), enc, 2)
	require.ErrorContains(t, err, `"a" appears twice`)
}

func TestLeaseStatusesEndsFinalLeases(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	stmts, err := LeaseStatuses([]store.LeaseStatusUpdate{
		{Token: "t1", From: store.LeaseActive, To: store.LeaseReleased, Now: now},
		{Token: "t2", From: store.LeaseActive, To: store.LeaseReleased, Now: now},
	}, enc, 500)
	require.NoError(t, err)
	require.Len(t, stmts, 1)
	require.True(t, strings.HasPrefix(stmts[0].SQL, "UPDATE orchestrator_leases SET status = ?, ended_at = ? WHERE token IN (?, ?)"), stmts[0].SQL)
	require.Equal(t, []any{"released", now.UnixMicro(), "t1", "t2", "active"}, stmts[0].Args)
}

func TestTruncateUTF8(t *testing.T) {
	t.Parallel()
	require.Equal(t, "héllo", TruncateUTF8("héllo", 10))
	require.Equal(t, "h", TruncateUTF8("héllo", 2), "half of é is dropped")
	require.Equal(t, "hé", TruncateUTF8("héllo", 3))
}
