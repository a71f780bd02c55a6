package tracing_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/tracing"
	"github.com/gpuorch/orchestrator/worker"
)

// TestOneTraceAcrossTheStream runs a job through the real API, engine, Redis stream and worker
// runtime in one process and checks that the agent's trace covers every step: the submit, the
// publication to the stream, the claim with its lease, the run and the completion.
//
// It installs the global tracer provider, as a process does; no other test of this package
// reads the global provider.
func TestOneTraceAcrossTheStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)

	quiet := slog.New(slog.DiscardHandler)
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	st := testenv.MySQLStore(t)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	lm := engine.NewLeaseManager(st, cfg, leases.Options{Logger: quiet})
	eng := engine.New(st, sc, cfg, engine.Options{Logger: quiet, Leases: lm})

	agentTok, agentLine, err := api.GenerateToken("agent", "alice")
	require.NoError(t, err)
	workerTok, workerLine, err := api.GenerateToken("worker", "")
	require.NoError(t, err)
	tokens, err := api.LoadTokens("", agentLine+";"+workerLine)
	require.NoError(t, err)
	srv := httptest.NewServer(api.New(api.Options{Engine: eng, Config: cfg, Store: st, Streams: sc, Leases: lm, Auth: api.AuthOptions{Tokens: tokens}, Logger: quiet}).Handler())
	t.Cleanup(srv.Close)

	// The agent starts the trace and sends it in the traceparent header.
	actx, agentSpan := tp.Tracer("agent").Start(ctx, "agent.submit")
	req, err := http.NewRequestWithContext(actx, http.MethodPost, srv.URL+"/jobs/submit",
		strings.NewReader(`{"job_id":"traced-1","type":"noop","payload":{}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+agentTok)
	req.Header.Set("Content-Type", "application/json")
	tracing.Inject(actx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	agentSpan.End()

	w, err := worker.New(worker.Config{
		WorkerID:   "w-traced",
		PoolID:     "pool-1",
		NodeID:     cfg.NodeID,
		Types:      []*config.JobType{cfg.JobType("noop")},
		API:        client.New(srv.URL, workerTok),
		Streams:    sc,
		Registry:   worker.NewBuiltinRegistry(worker.BuiltinOptions{JobTypes: cfg.JobTypes, Logger: quiet}),
		Logger:     quiet,
		Block:      20 * time.Millisecond,
		FlushDelay: time.Millisecond,
		Metrics:    worker.NewMetrics([]string{"noop"}),
	})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	require.Eventually(t, func() bool {
		j, err := st.JobGet(ctx, "traced-1")
		return err == nil && j.Status == store.JobDone
	}, 20*time.Second, 10*time.Millisecond)
	stop()
	require.NoError(t, <-ran)

	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == agentSpan.SpanContext().TraceID() {
			byName[s.Name] = s
		}
	}
	parentOf := func(child, parent string) {
		t.Helper()
		c, ok := byName[child]
		require.True(t, ok, "span %s is in the agent's trace (have %v)", child, names(byName))
		require.Equal(t, byName[parent].SpanContext.SpanID(), c.Parent.SpanID(), "%s is a child of %s", child, parent)
	}
	parentOf("POST /jobs/submit", "agent.submit")
	parentOf("engine.publish", "POST /jobs/submit")
	parentOf("job.claim", "engine.publish") // through the stream entry, then the claim call
	parentOf("lease.grant", "job.claim")
	parentOf("job.run", "engine.publish") // through the stream entry, in the worker
	parentOf("job.complete", "job.run")   // through the completion call
	run := byName["job.run"]
	require.Contains(t, run.Attributes, tracing.AttrJobID.String("traced-1"))
	require.Contains(t, run.Attributes, tracing.AttrWorkerID.String("w-traced"))
	require.Contains(t, byName["job.complete"].Attributes, tracing.AttrJobID.String("traced-1"))
}

func names(m map[string]tracetest.SpanStub) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	return out
}
