package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReportPath checks where a report goes without -out: the user's cache directory, else the
// temporary directory, never the working directory (a run from a checkout would leave a result
// in the tree); with -out, there.
func TestReportPath(t *testing.T) {
	started := time.Date(2026, 11, 26, 12, 30, 5, 0, time.FixedZone("CET", 3600))
	const name = "results-20261126T113005Z.json"

	t.Run("Out", func(t *testing.T) {
		require.Equal(t, "x/r.json", reportPath("x/r.json", started))
	})

	t.Run("CacheDir", func(t *testing.T) {
		cache := t.TempDir()
		t.Setenv("XDG_CACHE_HOME", cache)
		path := reportPath("", started)
		require.Equal(t, filepath.Join(cache, "gpu-orchestrator", "bench", name), path)

		// writeReport creates the directories and writes what it prints.
		var stdout bytes.Buffer
		rep := &Report{StartedAt: started.UTC(), Command: "bench"}
		require.NoError(t, writeReport(rep, &stdout, path))
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, stdout.String(), string(data))
		var back Report
		require.NoError(t, json.Unmarshal(data, &back))
		require.Equal(t, "bench", back.Command)
	})

	t.Run("NoCacheDir", func(t *testing.T) {
		// os.UserCacheDir fails without $XDG_CACHE_HOME and $HOME.
		t.Setenv("XDG_CACHE_HOME", "")
		t.Setenv("HOME", "")
		require.Equal(t, filepath.Join(os.TempDir(), "gpu-orchestrator", "bench", name), reportPath("", started))
	})

}
