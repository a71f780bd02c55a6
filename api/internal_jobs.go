package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// MaxItemsPerCall bounds the jobs, results and in-flight ids of one worker call, so one call is
// one bounded transaction.
const MaxItemsPerCall = 1000

var (
	// streamRefPattern bounds the stream name and entry id a worker echoes back (only logged and audited).
	streamRefPattern = ident.Pattern{Min: 0, Max: 256}
)

// validStreamRef reports whether s may name a stream: a type's stream, or a node stream, whose
// placement target may end in "@<pool>" (store.Target).
func validStreamRef(s string) bool {
	base, pool, routed := strings.Cut(s, "@")
	return len(s) <= streamRefPattern.Max && streamRefPattern.MatchString(base) &&
		(!routed || engine.PoolIDPattern.MatchString(pool))
}

// claim handles POST /internal/jobs/claim.
func (s *Server) claim(c *gin.Context) {
	var req wire.ClaimRequest
	if err := decodeJSON(c, internalBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if err := validateClaim(req); err != nil {
		s.writeError(c, err)
		return
	}
	scope, err := s.workerScope(c)
	if err == nil {
		err = s.claimInScope(scope, req)
	}
	if err != nil {
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
		// Every item must be the job's entry or one Redis delivered to this worker, whoever
		// calls: an invented {"job_id", "message_id": "1-0"} gets no job.
		CheckEntries: true,
		Types:        scope.Types,
	})
	if err != nil {
		s.writeError(c, err)
		return
	}
	if len(req.Results) > 0 {
		s.traceCompletions(c.Request.Context(), start, wire.CompleteRequest{WorkerID: req.WorkerID, Results: req.Results},
			engine.CompleteResult{Outcomes: res.Outcomes})
	}
	s.traceClaims(c.Request.Context(), start, req, res)
	body, err := encodeClaimResponse(wire.ClaimResponse{
		Claimed:  claimedToWire(res.Claimed, res.Leases, res.Parents),
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

// workerScope returns the record of the request's token when it is a scoped worker token, the
// zero record (no scope) otherwise. The token is looked up again only when some worker token
// of the set in use is scoped: unscoped deployments pay nothing.
func (s *Server) workerScope(c *gin.Context) (TokenRecord, error) {
	id := mustIdentity(c)
	tokens := s.tokens.Load()
	if id.Role != RoleWorker || tokens == nil || !tokens.scoped {
		return TokenRecord{}, nil
	}
	token, _ := bearerToken(c.GetHeader("Authorization"))
	rec, ok := tokens.Lookup(token)
	if !ok || rec.ID() != id.TokenID {
		return TokenRecord{}, unauthorized("unknown token") // revoked since the request began
	}
	return rec, nil
}

// outOfScope is a 403 naming the field that a scoped worker token may not use as it is.
func outOfScope(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Field: field, Message: fmt.Sprintf(format, args...)}
}

// scopeTypes describes a scope's types for an error message.
func scopeTypes(types []string) string { return strings.Join(types, ", ") }

// claimInScope checks a claim against the token's scope: the pool it names, and the stream of
// every item (each stream is one job type's). The engine checks each job's type again, since an
// item's stream is only what the caller says.
func (s *Server) claimInScope(scope TokenRecord, req wire.ClaimRequest) error {
	if scope.Pool != "" && req.PoolID != scope.Pool {
		return outOfScope("pool_id", "this worker token is scoped to pool %q, not %q", scope.Pool, req.PoolID)
	}
	if scope.Types == nil {
		return nil
	}
	for i, it := range req.Jobs {
		t := s.cfg.TypeOfStream(streams.TypeStream(it.Stream)) // a node stream is its type's
		if t == nil || !inScope(scope.Types, t.Name) {
			return outOfScope(itemField("jobs", i, "stream"), "stream %q is not of a job type this worker token is scoped to (%s)",
				it.Stream, scopeTypes(scope.Types))
		}
	}
	return nil
}

func validateClaim(req wire.ClaimRequest) error {
	if err := validateWorker(req.WorkerID); err != nil {
		return err
	}
	if req.PoolID != "" && !ident.ID.MatchString(req.PoolID) {
		return badID("pool_id", ident.ID)
	}
	if req.NodeID != "" && !ident.ID.MatchString(req.NodeID) {
		return badID("node_id", ident.ID)
	}
	if len(req.Jobs) > MaxItemsPerCall {
		return badRequest("jobs", "at most %d per call, got %d", MaxItemsPerCall, len(req.Jobs))
	}
	for i, it := range req.Jobs {
		switch {
		case !engine.JobIDPattern.MatchString(it.JobID):
			return badID(itemField("jobs", i, "job_id"), engine.JobIDPattern)
		case !validStreamRef(it.Stream):
			return badRequest(itemField("jobs", i, "stream"), "must be %s, with at most one @ before a pool id",
				streamRefPattern.Rule())
		case !streamRefPattern.MatchString(it.MessageID):
			return badID(itemField("jobs", i, "message_id"), streamRefPattern)
		}
	}
	if err := validateResults(req.Results); err != nil {
		return err
	}
	return validateIDs("in_flight", req.InFlight)
}

// start handles POST /internal/jobs/start.
func (s *Server) start(c *gin.Context) {
	var req wire.StartRequest
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
	c.JSON(http.StatusOK, wire.StartResponse{Cancel: cancel})
}

// complete handles POST /internal/jobs/complete.
func (s *Server) complete(c *gin.Context) {
	var req wire.CompleteRequest
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
	c.JSON(http.StatusOK, wire.CompleteResponse{Outcomes: outcomesToWire(res.Outcomes), Cancel: res.Cancel})
}

func validateComplete(req wire.CompleteRequest) error {
	if err := validateWorker(req.WorkerID); err != nil {
		return err
	}
	if err := validateResults(req.Results); err != nil {
		return err
	}
	return validateIDs("in_flight", req.InFlight)
}

// validateResults checks the results of a completion or of a claim that carries them.
func validateResults(results []wire.JobResult) error {
	if len(results) > MaxItemsPerCall {
		return badRequest("results", "at most %d per call, got %d", MaxItemsPerCall, len(results))
	}
	for i, r := range results {
		switch {
		case !engine.JobIDPattern.MatchString(r.JobID):
			return badID(itemField("results", i, "job_id"), engine.JobIDPattern)
		case r.Status != wire.ResultDone && r.Status != wire.ResultFailed:
			return badRequest(itemField("results", i, "status"), "must be %q or %q", wire.ResultDone, wire.ResultFailed)
		case r.Attempt < 0:
			return badRequest(itemField("results", i, "attempt"), "must not be negative")
		case r.ElapsedUS < 0 || r.ElapsedUS > maxElapsed.Microseconds():
			return badRequest(itemField("results", i, "elapsed_us"), "must be between 0 and %d", maxElapsed.Microseconds())
		}
	}
	return nil
}

// itemField names a field of item i of a list ("results[3].status"). Only an error spells it
// out: the valid items of a worker call, up to a thousand, cost no formatting.
func itemField(list string, i int, field string) string {
	return fmt.Sprintf("%s[%d].%s", list, i, field)
}

// maxElapsed bounds a result's elapsed_us: no attempt runs longer than the longest timeout.
const maxElapsed = engine.MaxTimeout + time.Hour

func validateWorker(id string) error {
	if id == "" {
		return badRequest("worker_id", "is required")
	}
	if !ident.ID.MatchString(id) {
		return badID("worker_id", ident.ID)
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
			return badID(fmt.Sprintf("%s[%d]", field, i), engine.JobIDPattern)
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
