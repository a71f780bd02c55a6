package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestBacklogFlags(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		o, _, err := parseFlags(nil)
		require.NoError(t, err)
		require.NotContains(t, o.scenarios, "backlog", "backlog is not run by default")
		require.Equal(t, 1000000, o.backlog)
		require.Equal(t, 5*time.Second, o.backlogProbe)
		require.Equal(t, 30*time.Minute, o.backlogTimeout)
	})

	t.Run("RunsLast", func(t *testing.T) {
		t.Parallel()
		o, _, err := parseFlags([]string{"-scenarios", "backlog,burndown,latency", "-backlog", "30000", "-backlog-probe", "2s"})
		require.NoError(t, err)
		require.Equal(t, []string{"burndown", "latency", "backlog"}, o.scenarios)
		require.Equal(t, 30000, o.backlog)
		require.Equal(t, 2*time.Second, o.backlogProbe)
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"-scenarios", "backlog", "-backlog", "10000"},
			{"-scenarios", "backlog", "-backlog-probe", "0s"},
			{"-scenarios", "backlog", "-backlog-timeout", "-1s"},
		} {
			_, _, err := parseFlags(args)
			require.Error(t, err, "%v", args)
		}
	})
}

func TestLastScenario(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"a", "c", "b"}, lastScenario([]string{"a", "b", "c"}, "b"))
	require.Equal(t, []string{"a", "c"}, lastScenario([]string{"a", "c"}, "b"))
	require.Equal(t, []string{"b"}, lastScenario([]string{"b"}, "b"))
}

func TestBacklogRatios(t *testing.T) {
	t.Parallel()
	probe := func(name string, rate, rss, heap float64) BacklogProbe {
		return BacklogProbe{Name: name, SubmitPerSec: rate, OrchestratorRSSMiB: rss, OrchestratorAnonMiB: rss - 30, OrchestratorHeapMiB: heap}
	}

	t.Run("GoalMet", func(t *testing.T) {
		t.Parallel()
		f := backlogRatios([]BacklogProbe{
			probe("empty", 2000, 40, 8), probe("base", 1900, 50, 10), probe("full", 1700, 58, 11),
		})
		require.Equal(t, 1.16, f.rss, "full over base, not over empty")
		require.Equal(t, 1.4, f.anon, "the same less the binary's pages (30 MiB here)")
		require.Equal(t, 1.1, f.heap)
		require.Equal(t, 0.85, f.submit, "full over empty, not over base")
		require.NotNil(t, f.goalMet)
		require.True(t, *f.goalMet, "judged on the RSS")
	})

	t.Run("GoalMissed", func(t *testing.T) {
		t.Parallel()
		for _, full := range []BacklogProbe{probe("full", 1700, 61, 0), probe("full", 1500, 50, 0)} {
			f := backlogRatios([]BacklogProbe{probe("empty", 2000, 40, 0), probe("base", 2000, 50, 0), full})
			require.NotNil(t, f.goalMet)
			require.False(t, *f.goalMet, "%+v", full)
		}
	})

	t.Run("Bounds", func(t *testing.T) {
		t.Parallel()
		// Exactly 20% either way still meets the goal.
		f := backlogRatios([]BacklogProbe{probe("empty", 1000, 1, 0), probe("base", 0, 50, 0), probe("full", 800, 60, 0)})
		require.True(t, *f.goalMet)
	})

	t.Run("Missing", func(t *testing.T) {
		t.Parallel()
		// The run stopped before the full probe: no ratio, no verdict.
		f := backlogRatios([]BacklogProbe{probe("empty", 2000, 40, 8), probe("base", 1900, 50, 10)})
		require.Equal(t, backlogFigures{}, f)
	})
}

func TestParseVmRSS(t *testing.T) {
	t.Parallel()
	status := "Name:\torchestrator\nVmPeak:\t 1300000 kB\nVmRSS:\t   45312 kB\nRssAnon:\t   30000 kB\n"
	n, ok := parseVMRSS(status)
	require.True(t, ok)
	require.Equal(t, int64(45312*1024), n)
	require.Equal(t, 44.25, mib(n))
	_, ok = parseVMRSS("Name:\tkthreadd\n")
	require.False(t, ok, "a kernel thread has no VmRSS")
	n, ok = statusKB(status, "RssAnon")
	require.True(t, ok)
	require.Equal(t, int64(30000*1024), n)
}

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	text := `# HELP go_memstats_heap_inuse_bytes Number of bytes in use by the heap.
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 8.912896e+06
go_memstats_heap_inuse_bytes_other{x="1"} 5
process_resident_memory_bytes 4.6391296e+07 1700000000000
gpu_orchestrator_jobs_total{type="noop",status="pending"} 12
`
	m, err := parseMetrics(strings.NewReader(text), metricRSS, metricHeapInuse, "absent")
	require.NoError(t, err)
	require.Equal(t, map[string]float64{metricHeapInuse: 8912896, metricRSS: 46391296}, m)
}

func TestInfoField(t *testing.T) {
	t.Parallel()
	info := "# Memory\r\nused_memory:1647352\r\nused_memory_human:1.57M\r\nused_memory_rss:9000000\r\n"
	n, ok := infoField(info, "used_memory")
	require.True(t, ok)
	require.Equal(t, int64(1647352), n)
	_, ok = infoField(info, "used_memory_human")
	require.False(t, ok, "not an integer")
	_, ok = infoField(info, "maxmemory")
	require.False(t, ok)
}

func TestFillHelpers(t *testing.T) {
	t.Parallel()

	t.Run("BatchCount", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 0, batchCount(0))
		require.Equal(t, 1, batchCount(1))
		require.Equal(t, 1, batchCount(client.SubmitBatchMax))
		require.Equal(t, 2, batchCount(client.SubmitBatchMax+1))
		require.Equal(t, 1000, batchCount(1000000))
	})

	t.Run("Batch", func(t *testing.T) {
		t.Parallel()
		req := submitter{jobType: "noop"}.batch(idSpace{prefix: "bx-backlog-f-"}, 1000, 3)
		require.Len(t, req.Jobs, 3)
		require.Equal(t, "bx-backlog-f-0001000", req.Jobs[0].JobID)
		require.Equal(t, "bx-backlog-f-0001002", req.Jobs[2].JobID)
		require.Equal(t, "noop", req.Jobs[2].Type)
	})

	t.Run("RefusedAgain", func(t *testing.T) {
		t.Parallel()
		jobs := []client.SubmitRequest{{JobID: "a"}, {JobID: "b"}, {JobID: "c"}, {JobID: "d"}}
		results := []client.SubmitBatchResult{
			{JobID: "a", Created: true},
			{JobID: "b", Error: &client.ErrorDetail{Code: "rate_limited"}, RetryAfterMS: 120},
			{JobID: "c", Error: &client.ErrorDetail{Code: "invalid_payload"}},
			{JobID: "d", Error: &client.ErrorDetail{Code: "rate_limited"}, RetryAfterMS: 300},
		}
		ls := newLoadStats(1, false)
		again, wait, refusal := refusedAgain(ls, jobs, results)
		require.Equal(t, []client.SubmitRequest{{JobID: "b"}, {JobID: "d"}}, again)
		require.Equal(t, 300*time.Millisecond, wait, "the longest delay")
		require.ErrorContains(t, refusal, "job b refused: rate_limited")
		require.Equal(t, int64(1), ls.failed.Load(), "only the job refused for good failed")
		require.Equal(t, map[string]int{"job_invalid_payload": 1, "retried_job_rate_limited": 2}, ls.errorCounts())
	})

	t.Run("Retryable", func(t *testing.T) {
		t.Parallel()
		for err, want := range map[error]bool{
			&client.APIError{StatusCode: 503, Code: "unavailable"}:  true,
			&client.APIError{StatusCode: 429, Code: "rate_limited"}: true,
			&client.APIError{StatusCode: 404, Code: "not_found"}:    false,
			&client.APIError{StatusCode: 413, Code: "too_large"}:    false,
			errors.New("connection reset"):                          true,
			fmt.Errorf("submit: %w", context.Canceled):              false,
		} {
			require.Equal(t, want, retryable(err), "%v", err)
		}
	})
}

func TestMergeCounts(t *testing.T) {
	t.Parallel()
	var m map[string]int
	mergeCounts(&m, nil)
	require.Nil(t, m, "nothing to add leaves it nil (omitted from the JSON)")
	mergeCounts(&m, map[string]int{"a": 1})
	mergeCounts(&m, map[string]int{"a": 2, "b": 1})
	require.Equal(t, map[string]int{"a": 3, "b": 1}, m)
}

func TestNextPoll(t *testing.T) {
	t.Parallel()
	require.Equal(t, pollInterval, nextPoll(1000, 0, time.Second), "no rate yet")
	require.Equal(t, pollIntervalMax, nextPoll(50000, 1000, time.Second), "50 s left: poll every 2 s")
	require.Equal(t, 500*time.Millisecond, nextPoll(2000, 1000, time.Second), "2 s left: a quarter of it")
	require.Equal(t, pollInterval, nextPoll(100, 1000, time.Second), "the end is near")
}
