package api

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// preRunBodyBytes bounds the body of POST /internal/jobs/pre_run.
const preRunBodyBytes = 4 << 10

// CodeStale refuses a pre-run check of an attempt the worker no longer holds (409).
const CodeStale = "stale"

// preRunJob handles POST /internal/jobs/pre_run: a worker asks, before it runs a job it
// claimed, whether the job's type's pre-run hook lets it (webhooks.PreRun): the answer says
// run, fail (for good, with the hook's message) or retry. Only the worker that holds the
// job's current attempt and lease may ask: the hook is the cluster's, and its calls are
// signed.
func (s *Server) preRunJob(c *gin.Context) {
	var req wire.PreRunRequest
	if err := decodeJSON(c, preRunBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if err := validateWorker(req.WorkerID); err != nil {
		s.writeError(c, err)
		return
	}
	if !engine.JobIDPattern.MatchString(req.JobID) {
		s.writeError(c, badID("job_id", engine.JobIDPattern))
		return
	}
	job, err := s.engine.Get(c.Request.Context(), req.JobID)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if (job.Status != store.JobClaimed && job.Status != store.JobRunning) || job.WorkerID != req.WorkerID ||
		job.Attempts != req.Attempt || job.LeaseToken != req.LeaseToken {
		s.writeError(c, &Error{Status: http.StatusConflict, Code: CodeStale, Field: "job_id",
			Message: fmt.Sprintf("job %s is not this worker's attempt %d (it is %s, attempt %d)", job.ID, req.Attempt, job.Status, job.Attempts)})
		return
	}
	scope, err := s.workerScope(c)
	if err == nil && !inScope(scope.Types, job.Type) {
		err = outOfScope("job_id", "job %s is of type %q, not of a type this worker token is scoped to (%s)", job.ID, job.Type,
			scopeTypes(scope.Types))
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.PreRunResponse{Decision: wire.PreRunRun}
	if s.preRun != nil {
		out = s.preRun.Check(c.Request.Context(), job)
	}
	c.JSON(http.StatusOK, out)
}
