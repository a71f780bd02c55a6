package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTable reads the three reports' shapes and computes the ratios the right way round:
// rates ours over theirs, latencies theirs over ours; a figure a system lacks has no ratio.
func TestTable(t *testing.T) {
	reports := map[string]json.RawMessage{
		"orchestrator": json.RawMessage(`{"scenarios": {"burndown": {"jobs_per_sec": 3000}, "streaming": {"jobs_per_sec": 1200},
			"latency": {"jobs_per_sec": 990, "latency_ms": {"p50": 20, "p99": 50}}}}`),
		"peers": json.RawMessage(`{"results": {"river": {"burndown": {"jobs_per_sec": 6000}, "streaming": {"jobs_per_sec": 1000},
			"latency": {"jobs_per_sec": 1000, "latency_ms": {"p50": 10, "p99": 100}}},
			"asynq": {"burndown": {"jobs_per_sec": 10000}}}}`),
		"asynq_fsync": json.RawMessage(`{"results": {"asynq": {"burndown": {"jobs_per_sec": 1000}}}}`),
	}
	rows, err := table(reports)
	require.NoError(t, err)
	by := map[string]row{}
	for _, r := range rows {
		by[r.Figure] = r
	}
	require.InDelta(t, 0.5, by["burndown"].Ratios["river"], 1e-9)
	require.InDelta(t, 3.0, by["burndown"].Ratios["asynq_fsync"], 1e-9)
	require.InDelta(t, 1.2, by["streaming"].Ratios["river"], 1e-9)
	require.InDelta(t, 0.5, by["submit → start p50"].Ratios["river"], 1e-9, "latency: theirs over ours")
	require.InDelta(t, 2.0, by["submit → start p99"].Ratios["river"], 1e-9)
	require.NotContains(t, by["streaming"].Ratios, "asynq", "asynq ran no streaming")

	var b strings.Builder
	printTable(&b, rows)
	require.Contains(t, b.String(), "| burndown (jobs/s) | 3000 | 6000 | 10000 | 1000 | 0.50× | 0.30× | 3.00× |")
}
