package main

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestFormatting(t *testing.T) {
	t.Parallel()
	t.Run("Age", func(t *testing.T) {
		t.Parallel()
		for d, want := range map[time.Duration]string{
			0: "0s", 59 * time.Second: "59s", 90 * time.Second: "1m", 59 * time.Minute: "59m",
			3 * time.Hour: "3h", 47 * time.Hour: "47h", 72 * time.Hour: "3d",
		} {
			require.Equal(t, want, fmtAge(d), "%s", d)
		}
	})

	t.Run("Time", func(t *testing.T) {
		t.Parallel()
		now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		require.Equal(t, "2025-01-02T03:01:05Z (3m ago)", fmtTime(now.Add(-3*time.Minute), now))
		require.Equal(t, "2025-01-02T03:04:35Z (in 30s)", fmtTime(now.Add(30*time.Second), now))
		require.Equal(t, "-", fmtTime(time.Time{}, now))
		require.Equal(t, "-", fmtTimePtr(nil, now))
	})

	t.Run("Truncate", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "abc", truncate("abc", 3))
		require.Equal(t, "ab…", truncate("abcd", 3))
		require.Equal(t, "üü…", truncate("üüüü", 3), "cuts runes, not bytes")
		require.Equal(t, "-", fmtRaw(nil, 10))
		require.Equal(t, `{"a":1}`, fmtRaw([]byte(`{"a":1}`), 10))
		require.Equal(t, `{"a":…`+" (12 bytes; -o json shows all)", fmtRaw([]byte(`{"a":123456}`), 6))
	})

	t.Run("TableCellsStayOnOneLine", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		tb := newTable(&buf, "A", "B")
		tb.row("x\ty", "line1\nline2")
		require.NoError(t, tb.flush())
		require.Equal(t, "A    B\nx y  line1 line2\n", buf.String())
	})

	t.Run("JSONKeepsHTML", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		require.NoError(t, writeJSON(&buf, map[string]string{"a": "<b>&"}))
		require.Equal(t, "{\n  \"a\": \"<b>&\"\n}\n", buf.String())
	})
}

func TestProgress(t *testing.T) {
	t.Parallel()
	jobs := []client.Job{{Status: "done"}, {Status: "dead_letter"}, {Status: "running"}, {Status: "pending"},
		{Status: "pending"}, {}, {Status: "paused"}}
	require.Equal(t, "2/7 finished: 1 done, 1 dead_letter, 1 running, 2 pending, 1 unknown, 1 paused", summarize(jobs))

	t.Run("Terminal", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		now := time.Unix(0, 0)
		p := &progress{w: &buf, tty: true, now: func() time.Time { return now }, start: now}
		p.update([]client.Job{{Status: "pending"}}, false)
		now = now.Add(2 * time.Second)
		p.update([]client.Job{{Status: "running"}}, false)
		p.warn(errors.New("503 unavailable"))
		p.update([]client.Job{{Status: "done"}}, true)
		p.end()
		p.end()
		require.Equal(t, "\r\x1b[K0/1 finished: 1 pending (0s)"+
			"\r\x1b[K0/1 finished: 1 running (2s)\n"+
			"orchctl: 503 unavailable (retrying)\n"+
			"\r\x1b[K1/1 finished: 1 done (2s)\n", buf.String())
	})

	t.Run("NotATerminal", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		now := time.Unix(0, 0)
		p := &progress{w: &buf, now: func() time.Time { return now }, start: now}
		open := []client.Job{{Status: "pending"}}
		p.update(open, false) // first: printed
		now = now.Add(time.Second)
		p.update(open, false) // too soon: skipped
		now = now.Add(progressEvery)
		p.update(open, false) // printed
		p.update([]client.Job{{Status: "done"}}, true)
		p.end()
		require.Equal(t, "waiting: 0/1 finished: 1 pending (0s)\n"+
			"waiting: 0/1 finished: 1 pending (6s)\n"+
			"waiting: 1/1 finished: 1 done (6s)\n", buf.String())
	})
}
