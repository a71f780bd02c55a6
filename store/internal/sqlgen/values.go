package sqlgen

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// This file holds the small helpers both drivers use to pass values to SQL and read them back.

// ASCIIIDs keeps the ids that can exist (see ASCIIID).
func ASCIIIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if ASCIIID(id) {
			out = append(out, id)
		}
	}
	return out
}

// ClampLimit is a list's page size: def when limit is not positive, at most maxLimit.
func ClampLimit(limit, def, maxLimit int) int {
	if limit <= 0 {
		return def
	}
	return min(limit, maxLimit)
}

// MaintenanceLimit clamps the limit of a maintenance statement.
func MaintenanceLimit(limit int) int {
	return ClampLimit(limit, MaintenanceLimitDefault, MaintenanceLimitMax)
}

// Placeholders is n "?" separated by commas, for an IN list or a VALUES row.
func Placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// Args is s as statement arguments.
func Args[T any](s []T) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// JSONArg passes JSON as a string (TEXT in SQLite; MariaDB's driver would send a []byte as
// _binary'...'), nil as NULL.
func JSONArg(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// NilIfEmpty is a JSON column as read: nil when NULL or empty.
func NilIfEmpty(raw []byte) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	return raw
}

// NullString stores the empty string as NULL.
func NullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// TypesJSON stores a list of job types as a JSON array (never null).
func TypesJSON(types []string) string {
	if types == nil {
		types = []string{}
	}
	b, _ := json.Marshal(types) // a []string always marshals
	return string(b)
}

// ParseTypes reads a list of job types stored by TypesJSON; null reads as empty.
func ParseTypes(raw []byte) ([]string, error) {
	var types []string
	if err := json.Unmarshal(raw, &types); err != nil {
		return nil, fmt.Errorf("decode job types: %w", err)
	}
	if types == nil {
		types = []string{}
	}
	return types, nil
}

// Micro is t as both schemas keep it: UTC, truncated (not rounded) to microseconds, so that
// what a caller gets back equals what it would read.
func Micro(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}
