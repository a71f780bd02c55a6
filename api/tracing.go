package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/tracing"
	"github.com/gpuorch/orchestrator/wire"
)

// untracedRoutes are scraped or probed every few seconds: a span each would drown the traces.
var untracedRoutes = map[string]bool{"/metrics": true, "/healthz": true, "/readyz": true}

// traceRequests is the middleware that runs every request in a server span named after its
// route ("POST /jobs/submit"), continuing the caller's trace when its traceparent header
// carries one: an agent's trace goes on through the orchestrator into the stream entry.
func (s *Server) traceRequests(c *gin.Context) {
	route := c.FullPath()
	if untracedRoutes[route] {
		c.Next()
		return
	}
	if route == "" {
		route = "unmatched"
	}
	ctx := tracing.Extract(c.Request.Context(), propagation.HeaderCarrier(c.Request.Header))
	ctx, span := tracing.Start(ctx, c.Request.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", c.Request.Method), attribute.String("http.route", route)))
	defer span.End()
	c.Request = c.Request.WithContext(ctx)
	c.Next()
	status := c.Writer.Status()
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

// traceClaims records, in the trace of each entry's job (the traceparent its entry carried), a
// job.claim span over the claim call and, for a claimed job, a lease.grant child span: the
// claim placed its lease in the same transaction, so both cover the call's time. The spans
// link to the call's own span, which serves many jobs' traces at once.
func (s *Server) traceClaims(ctx context.Context, start time.Time, req wire.ClaimRequest, res engine.ClaimResult) {
	parents := traceParents(len(req.Jobs), func(i int) (string, string) { return req.Jobs[i].JobID, req.Jobs[i].TraceParent })
	if len(parents) == 0 {
		return
	}
	end := time.Now()
	call := trace.LinkFromContext(ctx)
	who := []attribute.KeyValue{tracing.AttrWorkerID.String(req.WorkerID), tracing.AttrPoolID.String(req.PoolID),
		tracing.AttrNodeID.String(req.NodeID)}
	for _, j := range res.Claimed {
		tp, ok := parents[j.ID]
		if !ok {
			continue
		}
		jctx, span := tracing.Start(tracing.WithTraceParent(context.Background(), tp), "job.claim",
			trace.WithTimestamp(start), trace.WithLinks(call), trace.WithAttributes(who...),
			trace.WithAttributes(tracing.AttrJobID.String(j.ID), tracing.AttrJobType.String(j.Type), tracing.AttrAttempt.Int(j.Attempts)))
		if l, ok := res.Leases[j.ID]; ok {
			attrs := []attribute.KeyValue{attribute.String("lease.mode", string(l.Mode)), tracing.AttrNodeID.String(l.NodeID),
				attribute.Int64("lease.memory_mb", l.MemoryMB), attribute.String("lease.expires_at", l.ExpiresAt.UTC().Format(time.RFC3339Nano))}
			if l.GPUIndex != nil {
				attrs = append(attrs, attribute.Int("gpu_index", *l.GPUIndex))
			}
			_, ls := tracing.Start(jctx, "lease.grant", trace.WithTimestamp(start), trace.WithAttributes(attrs...))
			ls.End(trace.WithTimestamp(end))
		}
		span.End(trace.WithTimestamp(end))
	}
	for _, rf := range res.Refused {
		tp, ok := parents[rf.JobID]
		if !ok {
			continue
		}
		_, span := tracing.Start(tracing.WithTraceParent(context.Background(), tp), "job.claim",
			trace.WithTimestamp(start), trace.WithLinks(call), trace.WithAttributes(who...),
			trace.WithAttributes(tracing.AttrJobID.String(rf.JobID), attribute.String("claim.refused", rf.Reason),
				attribute.String("claim.refused_detail", rf.Detail)))
		span.End(trace.WithTimestamp(end))
	}
}

// traceCompletions records a job.complete span per result in its job's trace (the traceparent
// of the worker's run span), with the outcome the completion had.
func (s *Server) traceCompletions(ctx context.Context, start time.Time, req wire.CompleteRequest, res engine.CompleteResult) {
	parents := traceParents(len(req.Results), func(i int) (string, string) { return req.Results[i].JobID, req.Results[i].TraceParent })
	if len(parents) == 0 {
		return
	}
	end := time.Now()
	call := trace.LinkFromContext(ctx)
	for i, o := range res.Outcomes {
		tp, ok := parents[o.JobID]
		if !ok {
			continue
		}
		attrs := []attribute.KeyValue{tracing.AttrJobID.String(o.JobID), tracing.AttrWorkerID.String(req.WorkerID),
			attribute.String("job.outcome", o.Outcome), attribute.String("job.status", string(o.Status))}
		if i < len(req.Results) && req.Results[i].JobID == o.JobID {
			attrs = append(attrs, tracing.AttrAttempt.Int(req.Results[i].Attempt))
		}
		_, span := tracing.Start(tracing.WithTraceParent(context.Background(), tp), "job.complete",
			trace.WithTimestamp(start), trace.WithLinks(call), trace.WithAttributes(attrs...))
		span.End(trace.WithTimestamp(end))
	}
}

// traceParents maps job ids to the traceparents of n items; items without one are left out.
func traceParents(n int, item func(i int) (jobID, traceParent string)) map[string]string {
	var out map[string]string
	for i := range n {
		id, tp := item(i)
		if tp == "" {
			continue
		}
		if out == nil {
			out = make(map[string]string, n)
		}
		out[id] = tp
	}
	return out
}
