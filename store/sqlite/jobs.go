package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// batchChunk bounds the rows or ids one statement carries (IN lists, multi-row inserts),
// far below SQLite's limit of 32766 bound parameters.
const batchChunk = 500

// JobInsert inserts a new pending job, or returns the existing job with inserted=false when the
// id is taken (INSERT ... ON CONFLICT DO NOTHING, then a read). A zero AvailableAt means Now.
// The read sees the existing row: writers are serialised, so it was committed before this
// insert could run, or it was written earlier in the same transaction.
func (e executor) JobInsert(ctx context.Context, p store.JobInsertParams) (store.Job, bool, error) {
	if !sqlgen.ASCIIID(p.ID) {
		return store.Job{}, false, fmt.Errorf("insert job %q: a job id must be ASCII", p.ID)
	}
	j := sqlgen.NewJob(p)
	n, err := shared.ExecCount(ctx, e.w, "insert job "+p.ID,
		sqlgen.InsertJob+sqlgen.JobRow+" ON CONFLICT (job_id) DO NOTHING", shared.JobArgs(j)...)
	if err != nil || n == 1 {
		return j, n == 1, err
	}
	return shared.TakenJob(ctx, e.w, p.ID)
}

// JobMarkPublished implements store.JobExecutor. SQLite has no round trip to save: it is
// JobMarkEnqueued, uncounted.
func (e executor) JobMarkPublished(ctx context.Context, marks []store.JobEnqueued) error {
	_, err := e.JobMarkEnqueued(ctx, marks)
	return err
}

// JobMarkEnqueued sets enqueued=1 and the stream id of every mark that still matches (pending,
// not enqueued, same attempts), with one UPDATE per 500 marks joined to the marks as a VALUES
// list. When an id appears twice in a chunk the first mark wins, as with the MariaDB driver.
func (e executor) JobMarkEnqueued(ctx context.Context, marks []store.JobEnqueued) (int, error) {
	marks = slices.DeleteFunc(slices.Clone(marks), func(m store.JobEnqueued) bool { return !sqlgen.ASCIIID(m.ID) })
	total := 0
	for chunk := range slices.Chunk(marks, batchChunk) {
		var (
			values strings.Builder
			args   = make([]any, 0, 3*len(chunk)+1)
			seen   = make(map[string]bool, len(chunk))
		)
		for _, m := range chunk {
			if seen[m.ID] {
				continue
			}
			seen[m.ID] = true
			if len(args) > 0 {
				values.WriteString(", ")
			}
			values.WriteString("(?, ?, ?)")
			args = append(args, m.ID, m.StreamID, m.Attempts)
		}
		q := `WITH m(id, stream_id, attempts) AS (VALUES ` + values.String() + `)
			UPDATE orchestrator_jobs SET enqueued = 1, stream_id = m.stream_id
			FROM m
			WHERE orchestrator_jobs.job_id = m.id AND orchestrator_jobs.status = ?
				AND orchestrator_jobs.enqueued = 0 AND orchestrator_jobs.attempts = m.attempts`
		args = append(args, string(store.JobPending))
		n, err := shared.ExecCount(ctx, e.w, "mark jobs enqueued", q, args...)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
