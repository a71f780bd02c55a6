// Package ident checks the identifiers the API takes (job ids, agent, worker, pool and node
// names, stream references): a run of A-Z a-z 0-9 . _ : - of bounded length, other than "."
// and "..", which name a directory and its parent wherever an id becomes a path segment (a
// URL: /jobs/.. is /; a file name).
//
// It is a loop over the bytes rather than a regexp: a submit checks two of these and a claim
// three per job, and Go's regexp engine is many times slower than a loop over a table.
package ident

import "fmt"

// Pattern is the identifiers of Min to Max characters, every one of A-Z a-z 0-9 . _ : -, other
// than "." and "..".
type Pattern struct{ Min, Max int }

// allowed marks the bytes an identifier may hold.
var allowed = func() (t [256]bool) {
	for c := range 256 {
		t[c] = 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '-'
	}
	return t
}()

// ID is the identifiers the API takes for job ids and agent, worker, pool and node names.
var ID = Pattern{Min: 1, Max: 128}

// MatchString reports whether s is one of p's identifiers.
func (p Pattern) MatchString(s string) bool {
	if len(s) < p.Min || len(s) > p.Max || s == "." || s == ".." {
		return false
	}
	for i := range len(s) {
		if !allowed[s[i]] {
			return false
		}
	}
	return true
}

// String is p as a regular expression, for error messages, without the exception of "." and
// ".." (RE2 has no lookahead): messages say it apart.
func (p Pattern) String() string {
	return fmt.Sprintf("^[A-Za-z0-9._:-]{%d,%d}$", p.Min, p.Max)
}

// Rule is p in words, for error messages: "1 to 128 of A-Z a-z 0-9 . _ : -, and not . or ..",
// or "at most 256 of …" where p takes the empty string. A message says "must be " + p.Rule().
func (p Pattern) Rule() string {
	n := fmt.Sprintf("%d to %d", p.Min, p.Max)
	if p.Min == 0 {
		n = fmt.Sprintf("at most %d", p.Max)
	}
	return n + " of A-Z a-z 0-9 . _ : -, and not . or .."
}
