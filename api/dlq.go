package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// CodeNotDeadLetter is the 409 of a replay or purge of a job that is not in the dead-letter
// queue (another status, or already purged).
const CodeNotDeadLetter = "not_dead_letter"

// typeNameMax bounds the type filter (orchestrator_jobs.type is VARCHAR(64)).
const typeNameMax = 64

// listDeadLetters handles GET /dlq?type=&limit=&cursor=: the dead-letter queue from the job
// rows (the truth), newest job first, keyset-paginated like GET /jobs.
func (s *Server) listDeadLetters(c *gin.Context) {
	p := store.DeadLetterListParams{Type: c.Query("type"), Limit: ListLimitDefault}
	if len(p.Type) > typeNameMax {
		s.writeError(c, badRequest("type", "is longer than %d bytes", typeNameMax))
		return
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ListLimitMax {
			s.writeError(c, badRequest("limit", "must be an integer in 1..%d", ListLimitMax))
			return
		}
		p.Limit = n
	}
	if v := c.Query("cursor"); v != "" {
		cur, err := decodeCursor(v)
		if err != nil {
			s.writeError(c, err)
			return
		}
		p.After = cur
	}
	jobs, next, ok := s.page(c, p.Limit, p.After, func(ctx context.Context, after *store.JobCursor, n int) ([]store.Job, error) {
		p.After, p.Limit = after, n
		return s.engine.ListDeadLetters(ctx, p)
	})
	if !ok {
		return
	}
	out := wire.DeadLetterList{DeadLetters: make([]wire.DeadLetter, 0, len(jobs)), NextCursor: next}
	for _, j := range jobs {
		out.DeadLetters = append(out.DeadLetters, s.deadLetterToWire(j))
	}
	c.JSON(http.StatusOK, out)
}

// replayDeadLetter handles POST /dlq/:job_id/replay: 200 with the job, back to pending.
func (s *Server) replayDeadLetter(c *gin.Context) {
	s.dlqAction(c, s.engine.Replay)
}

// purgeDeadLetter handles DELETE /dlq/:job_id: 200 with the job, still dead_letter but no
// longer in the queue.
func (s *Server) purgeDeadLetter(c *gin.Context) {
	s.dlqAction(c, s.engine.Purge)
}

// dlqAction runs a replay or a purge of the :job_id path parameter as the caller.
func (s *Server) dlqAction(c *gin.Context, act func(ctx context.Context, jobID, actor string) (store.Job, error)) {
	jobID := c.Param("job_id")
	if !engine.JobIDPattern.MatchString(jobID) {
		s.writeError(c, notFound("no job %q", jobID))
		return
	}
	job, err := act(c.Request.Context(), jobID, mustIdentity(c).Actor())
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.writeError(c, notFound("no job %q", jobID))
		return
	case errors.Is(err, engine.ErrNotDeadLetter):
		s.writeError(c, &Error{Status: http.StatusConflict, Code: CodeNotDeadLetter, Message: err.Error()})
		return
	case errors.Is(err, engine.ErrNotReplayable):
		s.writeError(c, &Error{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error()})
		return
	case err != nil:
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, jobToWire(job))
}

// deadLetterToWire converts a dead letter's row.
func (s *Server) deadLetterToWire(j store.Job) wire.DeadLetter {
	d := wire.DeadLetter{
		JobID: j.ID, Type: j.Type, Agent: j.Agent, Attempts: j.Attempts, MaxAttempts: j.MaxAttempts,
		LastError: j.LastError, CreatedAt: j.CreatedAt.UTC(), DeadLetteredAt: utcPtr(j.FinishedAt),
	}
	if jt := s.cfg.JobType(j.Type); jt != nil {
		d.OriginStream = jt.Stream
	}
	if j.Enqueued {
		d.StreamID = j.StreamID
	}
	return d
}
