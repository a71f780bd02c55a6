package txretry

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

var errBusy = errors.New("busy")

func isBusy(err error) bool { return errors.Is(err, errBusy) }

func TestDoRerunsRetryableErrorsOnly(t *testing.T) {
	t.Parallel()
	calls := 0
	v, err := Do(t.Context(), Policy{3, isBusy}, func() (int, error) {
		if calls++; calls < 3 {
			return 0, errBusy
		}
		return calls, nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, v)

	calls = 0
	other := errors.New("other")
	err = Policy{3, isBusy}.Run(t.Context(), func() error { calls++; return other })
	require.ErrorIs(t, err, other)
	require.Equal(t, 1, calls, "an error that is not retryable is not rerun")

	calls = 0
	err = Policy{2, isBusy}.Run(t.Context(), func() error { calls++; return errBusy })
	require.ErrorIs(t, err, errBusy)
	require.Equal(t, 3, calls, "the first run and two reruns")
}

func TestBackoffEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := Policy{3, isBusy}.Run(ctx, func() error { return errBusy })
	require.ErrorIs(t, err, errBusy)
	require.ErrorIs(t, err, context.Canceled)
}

func TestTransactionsRerunAndMarkTheError(t *testing.T) {
	t.Parallel()
	runs := 0
	tx := func(context.Context, func(store.Tx) error) error { runs++; return errBusy }
	errMarked := errors.New("marked")
	final := func(err error) error { return errors.Join(errMarked, err) }
	err := NewTransactions(Policy{1, isBusy}, tx, final).WithTx(t.Context(), nil)
	require.ErrorIs(t, err, errMarked)
	require.ErrorIs(t, err, errBusy)
	require.Equal(t, 2, runs)
}
