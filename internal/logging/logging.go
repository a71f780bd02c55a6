// Package logging builds the process logger: log/slog, JSON in production, text in development.
package logging

import (
	"io"
	"log/slog"
	"strings"
)

// New returns a logger writing to w at level (debug|info|warn|error) in format (json|text).
func New(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		lv = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// Component is log (slog.Default() when nil) with the component attribute every line of a
// loop or service carries ("component": "dispatcher").
func Component(log *slog.Logger, name string) *slog.Logger {
	if log == nil {
		log = slog.Default()
	}
	return log.With("component", name)
}
