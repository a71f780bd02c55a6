package main

import (
	"fmt"
	"strconv"
	"time"
)

// fmtMB shows an amount of memory given in MiB: "512M", "24.0G" (GiB with one decimal from 1 GiB
// on), "0" for none. Tables only; -o json has the exact number.
func fmtMB(mb int64) string {
	switch {
	case mb == 0:
		return "0"
	case mb < 1024 && mb > -1024:
		return strconv.FormatInt(mb, 10) + "M"
	}
	return strconv.FormatFloat(float64(mb)/1024, 'f', 1, 64) + "G"
}

// fmtRelative shows an instant relative to now: "in 25s" or "3m ago".
func fmtRelative(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if d := t.Sub(now); d >= 0 {
		return "in " + fmtAge(d)
	}
	return fmtAge(now.Sub(t)) + " ago"
}

// fmtRelativePtr is fmtRelative of an optional instant.
func fmtRelativePtr(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtRelative(*t, now)
}

// fmtPct shows a percentage as the API gives it (two decimals at most): "87.25%".
func fmtPct(p float64) string {
	return strconv.FormatFloat(p, 'f', -1, 64) + "%"
}

// fmtFloat shows a rate without trailing zeros: 0.5, 100, 0.001.
func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// yesNo shows a boolean as a table cell.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// plural is "1 pool" / "2 pools".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// secondsDuration converts a number of seconds of the API (age_seconds) to a duration.
func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
