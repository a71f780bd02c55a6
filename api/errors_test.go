package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

func TestErrorStatus(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("submit job: %w", err) }
	cases := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"APIError", badRequest("limit", "bad"), 400, CodeInvalidRequest},
		{"Validation", wrap(&engine.ValidationError{Field: "type", Message: "unknown"}), 400, CodeInvalidRequest},
		{"BodyTooLarge", wrap(&http.MaxBytesError{Limit: 10}), 413, CodePayloadTooLarge},
		{"NotFound", wrap(store.ErrNotFound), 404, CodeNotFound},
		{"Terminal", wrap(fmt.Errorf("%w: done", engine.ErrJobTerminal)), 409, CodeJobTerminal},
		{"Conflict", wrap(store.ErrConflict), 409, CodeConflict},
		{"StoreUnavailable", wrap(errDown), 503, CodeUnavailable},
		{"StreamsUnavailable", wrap(fmt.Errorf("publish: %w", streams.ErrUnavailable)), 503, CodeUnavailable},
		{"Deadline", wrap(context.DeadlineExceeded), 503, CodeUnavailable},
		{"Canceled", wrap(context.Canceled), 503, CodeUnavailable},
		// The drivers mark what is unavailable (store.ErrUnavailable, streams.ErrUnavailable);
		// the API reads no driver's errors, so one that reaches it unmarked is a bug.
		{"UnmarkedDriverError", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), 500, CodeInternal},
		{"Bug", errors.New("nil map"), 500, CodeInternal},
		{"IllegalTransition", wrap(engine.ErrIllegalTransition), 500, CodeInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			status, code := ErrorStatus(c.err)
			require.Equal(t, c.status, status)
			require.Equal(t, c.code, code)
		})
	}
}

func TestWriteError(t *testing.T) {
	t.Parallel()
	srv := New(Options{Logger: slog.New(slog.DiscardHandler), Auth: AuthOptions{}})
	write := func(err error) (*httptest.ResponseRecorder, wire.ErrorBody) {
		rec := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(rec)
		c.Request = httptest.NewRequest(http.MethodGet, "/", nil)
		srv.writeError(c, err)
		return rec, decode[wire.ErrorBody](t, rec)
	}

	t.Run("ValidationNamesField", func(t *testing.T) {
		t.Parallel()
		rec, body := write(fmt.Errorf("submit job: %w", &engine.ValidationError{Field: "payload", Message: "too big"}))
		require.Equal(t, 400, rec.Code)
		require.Equal(t, wire.ErrorDetail{Code: CodeInvalidRequest, Message: "too big", Field: "payload"}, body.Error)
	})
	t.Run("UnavailableHidesDetails", func(t *testing.T) {
		t.Parallel()
		rec, body := write(fmt.Errorf("claim jobs: %w", errDown))
		require.Equal(t, 503, rec.Code)
		require.NotContains(t, body.Error.Message, "dial")
	})
	t.Run("InternalHidesDetails", func(t *testing.T) {
		t.Parallel()
		rec, body := write(errors.New("SELECT secret FROM x"))
		require.Equal(t, 500, rec.Code)
		require.Equal(t, "internal error", body.Error.Message)
	})
	t.Run("UnauthorizedChallenges", func(t *testing.T) {
		t.Parallel()
		rec, _ := write(unauthorized("no"))
		require.Equal(t, 401, rec.Code)
		require.Equal(t, `Bearer realm="orchestrator"`, rec.Header().Get("WWW-Authenticate"))
	})
}
