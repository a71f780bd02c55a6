package api

import (
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/engine"
)

// MaxItemsPerCall bounds the jobs, results and in-flight ids of one worker call, so one call is
// one bounded transaction.
const MaxItemsPerCall = 1000

var (
	workerIDRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	// streamRefRE bounds the stream name and entry id a worker echoes back (only logged and audited).
	streamRefRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{0,256}$`)
)

// claim handles POST /internal/jobs/claim.
func (s *Server) claim(c *gin.Context) {
	var req client.ClaimRequest
	if err := decodeJSON(c, internalBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if err := validateClaim(req); err != nil {
		s.writeError(c, err)
		return
	}
	start := time.Now()
	res, err := s.engine.Claim(c.Request.Context(), engine.ClaimParams{
		WorkerID: req.WorkerID,
		PoolID:   req.PoolID,
		NodeID:   req.NodeID,
		Items:    claimItemsFromWire(req.Jobs),
		Results:  resultsFromWire(req.Results),
		InFlight: req.InFlight,
	})
	if err != nil {
		s.writeError(c, err)
		return
	}
	if len(req.Results) > 0 {
		s.traceCompletions(c.Request.Context(), start, client.CompleteRequest{WorkerID: req.WorkerID, Results: req.Results},
			engine.CompleteResult{Outcomes: res.Outcomes})
	}
	s.traceClaims(c.Request.Context(), start, req, res)
	body, err := encodeClaimResponse(client.ClaimResponse{
		Claimed:  claimedToWire(res.Claimed, res.Leases),
		Refused:  refusalsToWire(res.Refused),
		Outcomes: outcomesToWire(res.Outcomes),
		Cancel:   res.Cancel,
	})
	if err != nil {
		// The claim is committed: its jobs are the worker's until their leases expire and
		// the rescuer retries them. That is what a lost answer costs anyway.
		s.writeError(c, err)
		return
	}
	c.Data(http.StatusOK, jsonContentType, body)
}

func validateClaim(req client.ClaimRequest) error {
	if err := validateWorker(req.WorkerID); err != nil {
		return err
	}
	if req.PoolID != "" && !workerIDRE.MatchString(req.PoolID) {
		return badRequest("pool_id", "must be 1 to 128 of A-Z a-z 0-9 . _ : -")
	}
	if req.NodeID != "" && !workerIDRE.MatchString(req.NodeID) {
		return badRequest("node_id", "must be 1 to 128 of A-Z a-z 0-9 . _ : -")
	}
	if len(req.Jobs) > MaxItemsPerCall {
		return badRequest("jobs", "at most %d per call, got %d", MaxItemsPerCall, len(req.Jobs))
	}
	for i, it := range req.Jobs {
		field := fmt.Sprintf("jobs[%d]", i)
		switch {
		case !engine.JobIDPattern.MatchString(it.JobID):
			return badRequest(field+".job_id", "must be 1 to 128 of A-Z a-z 0-9 . _ : -")
		case !streamRefRE.MatchString(it.Stream):
			return badRequest(field+".stream", "must be at most 256 of A-Z a-z 0-9 . _ : -")
		case !streamRefRE.MatchString(it.MessageID):
			return badRequest(field+".message_id", "must be at most 256 of A-Z a-z 0-9 . _ : -")
		}
	}
	if err := validateResults(req.Results); err != nil {
		return err
	}
	return validateIDs("in_flight", req.InFlight)
}

// start handles POST /internal/jobs/start.
func (s *Server) start(c *gin.Context) {
	var req client.StartRequest
	if err := decodeJSON(c, internalBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if err := validateWorker(req.WorkerID); err != nil {
		s.writeError(c, err)
		return
	}
	if err := validateIDs("job_ids", req.JobIDs); err != nil {
		s.writeError(c, err)
		return
	}
	cancel, err := s.engine.Start(c.Request.Context(), engine.StartParams{WorkerID: req.WorkerID, JobIDs: req.JobIDs})
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, client.StartResponse{Cancel: cancel})
}

// complete handles POST /internal/jobs/complete.
func (s *Server) complete(c *gin.Context) {
	var req client.CompleteRequest
	if err := decodeJSON(c, internalBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if err := validateComplete(req); err != nil {
		s.writeError(c, err)
		return
	}
	start := time.Now()
	res, err := s.engine.Complete(c.Request.Context(), engine.CompleteParams{
		WorkerID: req.WorkerID,
		Results:  resultsFromWire(req.Results),
		InFlight: req.InFlight,
	})
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.traceCompletions(c.Request.Context(), start, req, res)
	if allLeasesExpired(res.Outcomes) {
		// A zombie worker's late report: refused as a whole, nothing was recorded.
		s.writeError(c, errAllLeasesExpired(len(res.Outcomes)))
		return
	}
	c.JSON(http.StatusOK, client.CompleteResponse{Outcomes: outcomesToWire(res.Outcomes), Cancel: res.Cancel})
}

func validateComplete(req client.CompleteRequest) error {
	if err := validateWorker(req.WorkerID); err != nil {
		return err
	}
	if err := validateResults(req.Results); err != nil {
		return err
	}
	return validateIDs("in_flight", req.InFlight)
}

// validateResults checks the results of a completion or of a claim that carries them.
func validateResults(results []client.JobResult) error {
	if len(results) > MaxItemsPerCall {
		return badRequest("results", "at most %d per call, got %d", MaxItemsPerCall, len(results))
	}
	for i, r := range results {
		field := fmt.Sprintf("results[%d]", i)
		switch {
		case !engine.JobIDPattern.MatchString(r.JobID):
			return badRequest(field+".job_id", "must be 1 to 128 of A-Z a-z 0-9 . _ : -")
		case r.Status != client.ResultDone && r.Status != client.ResultFailed:
			return badRequest(field+".status", "must be %q or %q", client.ResultDone, client.ResultFailed)
		case r.Attempt < 0:
			return badRequest(field+".attempt", "must not be negative")
		case r.ElapsedUS < 0 || r.ElapsedUS > maxElapsed.Microseconds():
			return badRequest(field+".elapsed_us", "must be between 0 and %d", maxElapsed.Microseconds())
		}
	}
	return nil
}

// maxElapsed bounds a result's elapsed_us: no attempt runs longer than the longest timeout.
const maxElapsed = engine.MaxTimeout + time.Hour

func validateWorker(id string) error {
	if id == "" {
		return badRequest("worker_id", "is required")
	}
	if !workerIDRE.MatchString(id) {
		return badRequest("worker_id", "must be 1 to 128 of A-Z a-z 0-9 . _ : -")
	}
	return nil
}

// validateIDs checks a list of job ids: at most MaxItemsPerCall, each well-formed.
func validateIDs(field string, ids []string) error {
	if len(ids) > MaxItemsPerCall {
		return badRequest(field, "at most %d per call, got %d", MaxItemsPerCall, len(ids))
	}
	for i, id := range ids {
		if !engine.JobIDPattern.MatchString(id) {
			return badRequest(fmt.Sprintf("%s[%d]", field, i), "must be 1 to 128 of A-Z a-z 0-9 . _ : -")
		}
	}
	return nil
}

// allLeasesExpired reports a completion every result of which was refused for an expired lease
// (the API then answers 409 lease_expired instead of 200 with per-result outcomes).
func allLeasesExpired(outcomes []engine.Outcome) bool {
	for _, o := range outcomes {
		if o.Outcome != engine.OutcomeLeaseExpired {
			return false
		}
	}
	return len(outcomes) > 0
}
