package tracing_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuorch/orchestrator/tracing"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestTraceParent(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	ctx, span := tp.Tracer("test").Start(context.Background(), "parent")
	defer span.End()

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		tp := tracing.TraceParent(ctx)
		require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tp)
		got := trace.SpanContextFromContext(tracing.WithTraceParent(context.Background(), tp))
		require.True(t, got.IsRemote())
		require.Equal(t, span.SpanContext().TraceID(), got.TraceID())
		require.Equal(t, span.SpanContext().SpanID(), got.SpanID())
		require.Equal(t, span.SpanContext().TraceID().String(), tracing.TraceID(ctx))
	})

	t.Run("NoneOrMalformed", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, tracing.TraceParent(context.Background()))
		require.Empty(t, tracing.TraceID(context.Background()))
		for _, tp := range []string{"", "garbage", "00-zz-zz-01"} {
			ctx := tracing.WithTraceParent(context.Background(), tp)
			require.False(t, trace.SpanContextFromContext(ctx).IsValid(), tp)
		}
	})

	t.Run("LogHandlerAddsTheTrace", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		log := tracing.WithLogs(slog.New(slog.NewJSONHandler(&buf, nil))).With("job_id", "j1")
		log.InfoContext(ctx, "with a span")
		log.Info("without")
		lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
		require.Len(t, lines, 2)
		require.Contains(t, string(lines[0]), `"trace_id":"`+span.SpanContext().TraceID().String()+`"`)
		require.Contains(t, string(lines[0]), `"job_id":"j1"`)
		require.NotContains(t, string(lines[1]), "trace_id")
	})
}

func TestNewProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NoEndpointNoProvider", func(t *testing.T) {
		t.Parallel()
		tp, err := tracing.NewProvider(ctx, "svc", env(nil))
		require.NoError(t, err)
		require.Nil(t, tp)
	})

	t.Run("OnlyHTTPProtobuf", func(t *testing.T) {
		t.Parallel()
		_, err := tracing.NewProvider(ctx, "svc", env(map[string]string{
			tracing.EnvEndpoint: "http://127.0.0.1:4318", tracing.EnvProtocol: "grpc"}))
		require.ErrorContains(t, err, "only http/protobuf")
	})

	t.Run("ExportsOverOTLPHTTP", func(t *testing.T) {
		t.Parallel()
		var (
			mu    sync.Mutex
			paths []string
			body  []byte
		)
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			paths, body = append(paths, r.URL.Path), append(body, b...)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		t.Cleanup(collector.Close)
		tp, err := tracing.NewProvider(ctx, "svc", env(map[string]string{
			tracing.EnvEndpoint: collector.URL, tracing.EnvServiceName: "orchestrator-under-test"}))
		require.NoError(t, err)
		_, span := tp.Tracer(tracing.ScopeName).Start(ctx, "exported-span")
		span.End()
		require.NoError(t, tp.Shutdown(ctx), "shutdown flushes the batch")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"/v1/traces"}, paths)
		require.Contains(t, string(body), "exported-span")
		require.Contains(t, string(body), "orchestrator-under-test")
	})
}
