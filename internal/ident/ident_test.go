package ident

import (
	"regexp"
	"strings"
	"testing"
)

func TestPattern(t *testing.T) {
	p := Pattern{Min: 1, Max: 8}
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"a", true},
		{"Az09._:-", true},
		{"", false},
		{"123456789", false},
		{"a b", false},
		{"a/b", false},
		{"é", false},
		{"a\x00", false},
		{"job\n", false},
		{".", false},
		{"..", false},
		{"...", true},
		{"a..", true},
		{"._", true},
	} {
		if got := p.MatchString(tc.s); got != tc.want {
			t.Errorf("MatchString(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
	if !(Pattern{Max: 4}).MatchString("") {
		t.Error("a pattern of Min 0 refused the empty string")
	}
	if got, want := (Pattern{Min: 1, Max: 128}).String(), `^[A-Za-z0-9._:-]{1,128}$`; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestRule(t *testing.T) {
	for _, tc := range []struct {
		p    Pattern
		want string
	}{
		{ID, "1 to 128 of A-Z a-z 0-9 . _ : -, and not . or .."},
		{Pattern{Min: 1, Max: 100}, "1 to 100 of A-Z a-z 0-9 . _ : -, and not . or .."},
		{Pattern{Max: 256}, "at most 256 of A-Z a-z 0-9 . _ : -, and not . or .."},
	} {
		if got := tc.p.Rule(); got != tc.want {
			t.Errorf("%v.Rule() = %q, want %q", tc.p, got, tc.want)
		}
	}
}

// FuzzPattern checks that a Pattern accepts what the regular expression it prints accepts,
// and nothing else.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"", "a", "job-1:x.y_z", "a b", strings.Repeat("x", 13), "\xff", "ü", ".", ".."} {
		f.Add(s)
	}
	p := Pattern{Min: 1, Max: 12}
	re := regexp.MustCompile(`^[A-Za-z0-9._:-]{1,12}$`)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := p.MatchString(s), re.MatchString(s) && s != "." && s != ".."; got != want {
			t.Fatalf("MatchString(%q) = %v, the regexp says %v", s, got, want)
		}
	})
}

var sink bool

// BenchmarkPattern compares the byte loop with the regexp it replaced, on a job id of the
// length the API generates:
//
//	go test -run '^$' -bench BenchmarkPattern ./internal/ident/
func BenchmarkPattern(b *testing.B) {
	const id = "0d42321516b0-latency-0008499"
	p := Pattern{Min: 1, Max: 128}
	b.Run("loop", func(b *testing.B) {
		for b.Loop() {
			sink = p.MatchString(id)
		}
	})
	b.Run("regexp", func(b *testing.B) {
		re := regexp.MustCompile(p.String())
		for b.Loop() {
			sink = re.MatchString(id)
		}
	})
}
