package txretry

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

var errBusy = errors.New("busy")

func isBusy(err error) bool { return errors.Is(err, errBusy) }

func TestDoRerunsRetryableErrorsOnly(t *testing.T) {
	t.Parallel()
	calls := 0
	v, err := Do(t.Context(), 3, isBusy, func() (int, error) {
		if calls++; calls < 3 {
			return 0, errBusy
		}
		return calls, nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, v)

	calls = 0
	other := errors.New("other")
	err = Run(t.Context(), 3, isBusy, func() error { calls++; return other })
	require.ErrorIs(t, err, other)
	require.Equal(t, 1, calls, "an error that is not retryable is not rerun")

	calls = 0
	err = Run(t.Context(), 2, isBusy, func() error { calls++; return errBusy })
	require.ErrorIs(t, err, errBusy)
	require.Equal(t, 3, calls, "the first run and two reruns")
}

func TestBackoffEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := Run(ctx, 3, isBusy, func() error { return errBusy })
	require.ErrorIs(t, err, errBusy)
	require.ErrorIs(t, err, context.Canceled)
}
