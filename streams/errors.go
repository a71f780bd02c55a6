package streams

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable means Redis could not serve a command now: unreachable, a broken connection,
// the client's pool exhausted or closed, or the server loading its data, failing over or busy
// with a script. The same command may succeed later; the API answers 503. Every command of a
// client made by NewRedis, or passed to MapErrors, fails with an error that matches it
// (errors.Is), the go-redis error still in the chain with its message unchanged.
var ErrUnavailable = errors.New("streams: redis unavailable")

// unavailableReplies are the prefixes of server replies that say "not now".
var unavailableReplies = []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY"}

// MapErrors makes every command of rdb, pipelined or not, fail with an error marked
// ErrUnavailable (see mapErr) when Redis cannot serve it. NewRedis calls it; call it once on
// a client made otherwise.
func MapErrors(rdb redis.UniversalClient) { rdb.AddHook(errorHook{}) }

// mapErr marks err ErrUnavailable when it says Redis cannot serve now; other errors (redis.Nil,
// a script's error, a wrong type), nil included, come back as they are. The caller's own
// context ending is left to the caller.
func mapErr(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !unavailable(err) {
		return err
	}
	return &unavailableError{err: err}
}

func unavailable(err error) bool {
	var (
		netErr net.Error
		reply  redis.Error
	)
	switch {
	case errors.Is(err, redis.Nil), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false // context.DeadlineExceeded is a net.Error too
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		errors.As(err, &netErr), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &reply):
		msg := reply.Error()
		for _, p := range unavailableReplies {
			if strings.HasPrefix(msg, p+" ") || msg == p {
				return true
			}
		}
	}
	return false
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// errorHook applies mapErr to every command's error: the one returned and the one the command
// keeps (cmd.Err), which go-redis sets from what the hook returns for a single command and
// which the hook sets itself for the commands of a pipeline.
type errorHook struct{}

func (errorHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (errorHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := mapErr(next(ctx, cmd))
		if err != nil {
			cmd.SetErr(err)
		}
		return err
	}
}

func (errorHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil {
				cmd.SetErr(mapErr(e))
			}
		}
		return mapErr(err)
	}
}
