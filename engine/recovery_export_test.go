package engine

import (
	"context"

	"github.com/gpuorch/orchestrator/streams"
)

// RecentEntries exposes a recovery's index of a stream's recent entries to the tests of package
// engine_test: Update reads as one page of jobs does, Has says whether an entry names a job.
type RecentEntries struct{ r *recentEntries }

// NewRecentEntries indexes a stream's entries from the entry id since on.
func NewRecentEntries(since string) RecentEntries {
	return RecentEntries{&recentEntries{next: since, jobs: map[string]bool{}}}
}

// Update reads the entries added since the last read; newPage starts a page of jobs.
func (x RecentEntries) Update(ctx context.Context, sc *streams.Client, stream string, newPage bool) error {
	if newPage {
		x.r.updated = false
	}
	return x.r.update(ctx, sc, stream)
}

// Has reports whether an entry read names jobID.
func (x RecentEntries) Has(jobID string) bool { return x.r.jobs[jobID] }

// Read is how many entries were read in all.
func (x RecentEntries) Read() int { return x.r.read }
