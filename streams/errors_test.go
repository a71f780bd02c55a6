package streams_test

import (
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/streams"
)

// TestErrUnavailable checks that a Redis that cannot be reached fails single and pipelined
// commands with streams.ErrUnavailable, the go-redis error still in the chain, and that the
// answers of a Redis that is up are left alone.
func TestErrUnavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	rdb := streams.NewRedis(addr, "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{})

	_, err = sc.Len(t.Context(), "s") // one command
	require.ErrorIs(t, err, streams.ErrUnavailable)
	var opErr *net.OpError
	require.ErrorAs(t, err, &opErr, "the network error stays in the chain")
	_, err = sc.Publish(t.Context(), []streams.Message{{Stream: "s", JobID: "j", Type: "t"}}) // a pipeline
	require.ErrorIs(t, err, streams.ErrUnavailable)
	cmds, err := rdb.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		p.Get(t.Context(), "a")
		p.Get(t.Context(), "b")
		return nil
	})
	require.ErrorIs(t, err, streams.ErrUnavailable)
	for _, c := range cmds {
		require.ErrorIs(t, c.Err(), streams.ErrUnavailable, "each command of the pipeline")
	}
	require.ErrorIs(t, sc.Ping(t.Context()), streams.ErrUnavailable)

	_, up := setup(t)
	err = up.Get(t.Context(), "missing").Err()
	require.ErrorIs(t, err, redis.Nil)
	require.NotErrorIs(t, err, streams.ErrUnavailable)
	err = up.Do(t.Context(), "NOSUCHCOMMAND").Err()
	require.Error(t, err)
	require.NotErrorIs(t, err, streams.ErrUnavailable, "a wrong command is no outage")
}
