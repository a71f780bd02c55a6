package api

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// TestReadPage covers the slices a list page is read in: the page and its "more" are those of
// one read of limit+1 jobs, unless the payloads fill the byte budget first.
func TestReadPage(t *testing.T) {
	t.Parallel()
	// jobs are newest first; a cursor's job is excluded, as the store does.
	jobs := func(n, payload int) []store.Job {
		out := make([]store.Job, n)
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range out {
			out[i] = store.Job{ID: fmt.Sprintf("j%04d", n-i), CreatedAt: base.Add(time.Duration(n-i) * time.Second),
				Payload: []byte(strings.Repeat("x", payload))}
		}
		return out
	}
	lister := func(all []store.Job, reads *[]int) func(*store.JobCursor, int) ([]store.Job, error) {
		return func(after *store.JobCursor, n int) ([]store.Job, error) {
			*reads = append(*reads, n)
			from := 0
			if after != nil {
				for from < len(all) && all[from].ID != after.ID {
					from++
				}
				from++
			}
			return all[from:min(from+n, len(all))], nil
		}
	}
	ids := func(js []store.Job) []string {
		out := make([]string, len(js))
		for i, j := range js {
			out[i] = j.ID
		}
		return out
	}

	for _, tc := range []struct {
		name         string
		total, limit int
		payload, max int
		want         int
		more         bool
		reads        []int
	}{
		{"OneSlice", 10, 5, 1, 1 << 20, 5, true, []int{6}},
		{"ExactlyAll", 10, 10, 1, 1 << 20, 10, false, []int{11}},
		{"FewerThanAsked", 10, 50, 1, 1 << 20, 10, false, []int{26}},
		{"Slices", 100, 60, 1, 1 << 20, 60, true, []int{26, 26, 11}},
		{"SlicesToTheEnd", 50, 60, 1, 1 << 20, 50, false, []int{26, 26}},
		{"SlicesExactlyAll", 50, 50, 1, 1 << 20, 50, false, []int{26, 26}},
		{"BudgetEndsThePage", 10, 10, 300, 1000, 4, true, []int{11}},
		{"BudgetOnTheLastJob", 4, 10, 300, 1000, 4, false, []int{11}},
		{"OneJobOverTheBudget", 3, 10, 5000, 1000, 1, true, []int{11}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			all := jobs(tc.total, tc.payload)
			var reads []int
			got, more, err := readPage(tc.limit, tc.max, nil, lister(all, &reads))
			require.NoError(t, err)
			require.Equal(t, ids(all[:tc.want]), ids(got), "the newest jobs, in order, each once")
			require.Equal(t, tc.more, more)
			require.Equal(t, tc.reads, reads)
		})
	}
}
