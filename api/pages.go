package api

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/store"
)

// listSlice is how many jobs one read of a list page takes.
const listSlice = 25

// listPageBytes caps the payloads and results one page of GET /jobs or GET /dlq holds: past
// it the page ends early, with its next_cursor. Payloads may be up to max_payload_bytes each,
// and 500 of them would make one request hold hundreds of megabytes.
const listPageBytes = 8 << 20

// page reads a keyset page of up to limit jobs after first through list (readPage, within
// listPageBytes) and returns the cursor of the next page ("" on the last). It answers an error
// itself; ok is false when it did.
func (s *Server) page(c *gin.Context, limit int, first *store.JobCursor,
	list func(ctx context.Context, after *store.JobCursor, n int) ([]store.Job, error)) (jobs []store.Job, next string, ok bool) {
	ctx := c.Request.Context()
	jobs, more, err := readPage(limit, listPageBytes, first, func(after *store.JobCursor, n int) ([]store.Job, error) {
		return list(ctx, after, n)
	})
	if err != nil {
		s.writeError(c, err)
		return nil, "", false
	}
	if more {
		next = encodeCursor(jobs[len(jobs)-1])
	}
	return jobs, next, true
}

// readPage reads a keyset page of up to limit jobs after first through list (which returns up
// to n jobs after a cursor, newest first), in slices of listSlice, and reports whether more
// follow. The page ends early, holding at least one job, once its payloads and results reach
// maxBytes.
func readPage(limit, maxBytes int, first *store.JobCursor, list func(after *store.JobCursor, n int) ([]store.Job, error)) ([]store.Job, bool, error) {
	var (
		jobs  []store.Job
		bytes int
		after = first
	)
	for {
		n := min(limit-len(jobs), listSlice)
		got, err := list(after, n+1) // one more than taken tells whether another follows
		if err != nil {
			return nil, false, err
		}
		for i, j := range got[:min(n, len(got))] {
			jobs = append(jobs, j)
			bytes += len(j.Payload) + len(j.Result)
			if bytes >= maxBytes {
				return jobs, i+1 < len(got), nil
			}
		}
		if len(got) <= n {
			return jobs, false, nil
		}
		if len(jobs) == limit {
			return jobs, true, nil
		}
		last := jobs[len(jobs)-1]
		after = &store.JobCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}
