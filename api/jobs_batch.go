package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/strictjson"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// Limits of POST /jobs/submit_batch.
const (
	// SubmitBatchMax is the most jobs one batch takes: a batch is answered in one go, so it is
	// kept to what two of the engine's group commits hold.
	SubmitBatchMax = wire.SubmitBatchMax
	// SubmitBatchMaxBytes caps the body of a batch. SubmitBatchMax times the limit of one submit
	// (max_payload_bytes plus its envelope) would be gigabytes; each job's payload is still held
	// to max_payload_bytes.
	SubmitBatchMaxBytes = 32 << 20
	// batchSlotWait is how long a batch waits for its turn (config.SubmitBatchConcurrency)
	// before it is answered 503 with a Retry-After: the server is busy with other batches.
	batchSlotWait = 10 * time.Second
	// batchIdleReturn is how long after the last batch ended the memory of the burst is given
	// back to the system (afterBatch).
	batchIdleReturn = 2 * time.Second
)

// submitBatchBody is the body of POST /jobs/submit_batch. The jobs stay raw until each is
// decoded on its own (decodeBatchJob), so that a malformed one is named by its index.
type submitBatchBody struct {
	Jobs []json.RawMessage `json:"jobs"`
}

// batchJob is one job of a batch on its way: its params, then its admission, then its outcome.
// err set means refused: nothing is written for it.
type batchJob struct {
	jobID      string // as the client sent it
	p          engine.SubmitParams
	err        error
	refused    bool          // by admission control; err is the refusal
	retryAfter time.Duration // of a refusal
	adm        admittedJob
	out        engine.SubmitOutcome
}

// submitBatch handles POST /jobs/submit_batch: 200 with one result per job, in request order.
// Each job is checked, admitted and answered as POST /jobs/submit would, but a refused job
// does not fail the others: its result carries the error. The admitted jobs go to the engine
// together, which commits them in group commits and publishes them with one pipeline. The
// request itself fails (400, 413) only when its body is malformed, too large, or holds 0 or
// more than SubmitBatchMax jobs; then nothing is admitted or written.
func (s *Server) submitBatch(c *gin.Context) {
	id := mustIdentity(c)
	if s.needsTurn(c.Request) {
		release, err := s.batchTurn(c)
		if err != nil {
			s.writeError(c, err)
			return
		}
		defer release()
	}
	s.batchesActive.Add(1)
	defer s.afterBatch()
	var body submitBatchBody
	if err := decodeJSON(c, s.submitBatchLimit(), &body); err != nil {
		s.writeError(c, err)
		return
	}
	if n := len(body.Jobs); n == 0 || n > SubmitBatchMax {
		s.writeError(c, badRequest("jobs", "must hold 1 to %d jobs, not %d", SubmitBatchMax, n))
		return
	}
	// Every job is decoded before any is admitted: a malformed one refuses the whole request,
	// and must not have cost the others their tokens.
	jobs := make([]batchJob, len(body.Jobs))
	for i, raw := range body.Jobs {
		var b submitBody
		jobErr, err := decodeBatchJob(i, raw, &b)
		if err != nil {
			s.writeError(c, err)
			return
		}
		jobs[i].jobID = b.JobID
		if jobs[i].err = jobErr; jobErr == nil {
			jobs[i].p, jobs[i].err = s.submitParams(id, b)
		}
	}
	body.Jobs = nil

	s.admitBatch(c, jobs)
	s.submitAdmitted(c, jobs)
	c.JSON(http.StatusOK, s.batchResponse(c, jobs))
}

// needsTurn reports whether a batch must wait for a turn (batchTurn): when its body is larger
// than one submit may be (max_payload_bytes and the envelope), or of unknown length. A batch
// no larger holds about what a single submit holds, and single submits take no turn: gating
// small batches too cost many concurrent senders of small batches much of their rate, for no
// memory saved.
func (s *Server) needsTurn(r *http.Request) bool {
	return r.ContentLength < 0 || r.ContentLength > s.cfg.MaxPayloadBytes+submitEnvelopeBytes
}

// batchTurn waits until fewer than config.SubmitBatchConcurrency large batches are being
// worked on, before the body is read: the batches beyond stay in their connections, not in
// memory. It returns the release of the turn; an error when the wait passed s.batchWait (a 503
// with Retry-After) or the client went away.
func (s *Server) batchTurn(c *gin.Context) (release func(), err error) {
	release = func() { <-s.batchSlots }
	select {
	case s.batchSlots <- struct{}{}:
		return release, nil
	default:
	}
	t := time.NewTimer(s.batchWait)
	defer t.Stop()
	select {
	case s.batchSlots <- struct{}{}:
		return release, nil
	case <-c.Request.Context().Done():
		return nil, c.Request.Context().Err()
	case <-t.C:
		setRetryAfter(c, time.Second)
		return nil, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: fmt.Sprintf("%d large batch submits are in progress and this one waited %s for its turn; retry later", cap(s.batchSlots), s.batchWait)}
	}
}

// afterBatch ends a batch, and gives the memory of a burst of batches back to the system once
// no batch has run for s.batchIdle. A batch of 1,000 jobs allocates megabytes; after a bulk
// fill the Go runtime keeps the heap it grew to until later collections shrink its goal, which
// on an idle orchestrator can take minutes. A forced collection of the small heap left costs a
// few milliseconds once per burst.
func (s *Server) afterBatch() {
	s.batchesActive.Add(-1)
	end := s.batchEnds.Add(1)
	time.AfterFunc(s.batchIdle, func() {
		if s.batchEnds.Load() != end || s.batchesActive.Load() > 0 {
			return // another batch ran since, or runs now: the last one to end returns it
		}
		start := time.Now()
		s.freeMemory()
		s.log.Debug("returned the memory of a burst of batch submits to the system", "took", time.Since(start))
	})
}

// admitBatch runs admission control on every checked job of a batch, in order. A refusal is
// the job's error; the answer's Retry-After is the longest of them.
func (s *Server) admitBatch(c *gin.Context, jobs []batchJob) {
	var (
		refused    bool
		retryAfter time.Duration
	)
	for i := range jobs {
		j := &jobs[i]
		if j.err != nil {
			continue
		}
		adm, d, err := s.decideJob(c.Request.Context(), &j.p)
		switch {
		case err != nil:
			j.err = err
		case d != nil:
			j.err, j.refused, j.retryAfter = rejectionError(*d), true, d.RetryAfter
			refused, retryAfter = true, max(retryAfter, d.RetryAfter)
		default:
			j.adm = adm
		}
	}
	if refused {
		setRetryAfter(c, retryAfter)
	}
}

// submitAdmitted submits the admitted jobs of a batch with one call of the engine, and
// finishes their admissions with the outcomes.
func (s *Server) submitAdmitted(c *gin.Context, jobs []batchJob) {
	ps := make([]engine.SubmitParams, 0, len(jobs))
	at := make([]int, 0, len(jobs))
	for i, j := range jobs {
		if j.err == nil {
			ps = append(ps, j.p)
			at = append(at, i)
		}
	}
	if len(ps) == 0 {
		return
	}
	for k, out := range s.engine.SubmitMany(c.Request.Context(), ps) {
		j := &jobs[at[k]]
		j.out, j.err = out, submitError(out.Err)
		j.adm.finish(out.Err == nil && out.Job.Status == store.JobPending)
	}
}

// batchResponse builds the answer of a batch. Jobs that failed on the server's side (5xx) are
// logged once for the whole batch, with the first such error.
func (s *Server) batchResponse(c *gin.Context, jobs []batchJob) wire.SubmitBatchResponse {
	resp := wire.SubmitBatchResponse{Results: make([]wire.SubmitBatchResult, len(jobs))}
	var (
		serverErrs  int
		worstStatus int
		firstErr    error
	)
	for i, j := range jobs {
		r := &resp.Results[i]
		if j.err != nil {
			status, d := errorDetail(j.err)
			r.JobID, r.Error = j.jobID, &d
			if j.refused {
				r.RetryAfterMS = max(1, (j.retryAfter + time.Millisecond - 1).Milliseconds())
			}
			if status >= http.StatusInternalServerError && !j.refused {
				serverErrs++
				worstStatus = max(worstStatus, status)
				if firstErr == nil {
					firstErr = j.err
				}
			}
			resp.Failed++
			continue
		}
		job := j.out.Job
		r.JobID, r.Status, r.Created = job.ID, string(job.Status), j.out.Created
		if from := j.adm.routedFrom(); from != "" {
			r.Type, r.RoutedFrom = job.Type, from
		}
		if j.out.Created {
			resp.Created++
		} else {
			resp.Existing++
		}
	}
	if serverErrs > 0 {
		s.logError(c, worstStatus, firstErr, "failed_jobs", serverErrs, "jobs", len(jobs))
	}
	return resp
}

// submitBatchLimit is the body limit of a batch: SubmitBatchMax submits at their own limit, up
// to SubmitBatchMaxBytes (which the envelopes alone exceed: in practice, the cap).
func (s *Server) submitBatchLimit() int64 {
	if one := s.cfg.MaxPayloadBytes + submitEnvelopeBytes; one <= SubmitBatchMaxBytes/SubmitBatchMax {
		return one * SubmitBatchMax
	}
	return SubmitBatchMaxBytes
}

// decodeBatchJob decodes job i of a batch as strictly as decodeJSON decodes a submit. A job
// whose payload strictjson refuses (invalid UTF-8, a lone surrogate escape, a repeated key,
// nesting too deep) fails alone: jobErr is its 400, naming the field as the single submit
// would ("payload.a"), and the job is decoded for its job_id. Any other error refuses the
// whole request: a 400 naming the field within the job ("jobs[3].timeout"), or the job
// ("jobs[3]").
func decodeBatchJob(i int, raw json.RawMessage, dst *submitBody) (jobErr, err error) {
	// The job's own depth counts from the body: the body's object and the jobs array.
	p := strictjson.Check(raw, shapeOf(dst), MaxJSONDepth, 2)
	if p != nil && p.InField != "payload" {
		return nil, badRequest(fmt.Sprintf("jobs[%d].%s", i, p.Path), "%s", p.Message)
	}
	if p != nil {
		jobErr = badRequest(p.Path, "%s", p.Message)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err = dec.Decode(dst)
	if err == nil {
		return jobErr, nil
	}
	field := fmt.Sprintf("jobs[%d]", i)
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field == "" {
		return nil, badRequest(field, "must be a JSON object (a job), not %s", typeErr.Value)
	}
	var apiErr *Error
	if !errors.As(decodeError(err), &apiErr) {
		return nil, badRequest(field, "cannot decode the job: %s", err.Error())
	}
	if apiErr.Field != "" {
		field += "." + apiErr.Field
	}
	return nil, badRequest(field, "%s", apiErr.Message)
}
