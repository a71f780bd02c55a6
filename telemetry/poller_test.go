package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitTimeout bounds every wait on a signal; it is a deadline, not a synchronisation sleep.
const waitTimeout = 10 * time.Second

type pollerBundle struct {
	provider *fakeProvider
	poller   *Poller
	sunk     chan Snapshot
}

// setupPoller returns a poller over a fake provider with two GPUs whose sink forwards every
// snapshot on sunk (buffered, so a slow test never blocks the loop for long).
func setupPoller(t *testing.T, cfg PollerConfig) *pollerBundle {
	t.Helper()
	b := &pollerBundle{provider: &fakeProvider{name: SourceSimulated, gpus: 2}, sunk: make(chan Snapshot, 64)}
	if cfg.Sink == nil {
		cfg.Sink = func(_ context.Context, snap Snapshot) error {
			select {
			case b.sunk <- snap:
			default:
			}
			return nil
		}
	}
	cfg.Logger = quiet
	p, err := NewPoller(b.provider, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Stop)
	b.poller = p
	return b
}

func (b *pollerBundle) next(t *testing.T) Snapshot {
	t.Helper()
	select {
	case snap := <-b.sunk:
		return snap
	case <-time.After(waitTimeout):
		require.FailNow(t, "no snapshot reached the sink")
		return Snapshot{}
	}
}

func TestPoller(t *testing.T) {
	t.Parallel()

	t.Run("LoopFeedsSinkAndLatest", func(t *testing.T) {
		t.Parallel()
		b := setupPoller(t, PollerConfig{Interval: time.Millisecond})
		_, ok := b.poller.Latest()
		require.False(t, ok, "nothing before the first poll")
		require.NoError(t, b.poller.Start(context.Background()))
		first := b.next(t)
		second := b.next(t)
		require.True(t, second.Taken.After(first.Taken), "the loop keeps polling")
		latest, ok := b.poller.Latest()
		require.True(t, ok)
		require.Len(t, latest.GPUs, 2)
		require.False(t, latest.Taken.Before(second.Taken))
	})

	t.Run("WakeTriggersPoll", func(t *testing.T) {
		t.Parallel()
		b := setupPoller(t, PollerConfig{Interval: time.Hour})
		require.NoError(t, b.poller.Start(context.Background()))
		b.next(t) // the first poll is immediate without Stagger
		b.poller.Wake()
		b.next(t)
		require.Equal(t, 2, b.provider.callCount())
	})

	t.Run("ErrorsAreLoggedAndTheLoopGoesOn", func(t *testing.T) {
		t.Parallel()
		b := setupPoller(t, PollerConfig{Interval: time.Millisecond})
		b.provider.errs = []error{errors.New("flaky"), errors.New("flaky")}
		require.NoError(t, b.poller.Start(context.Background()))
		b.next(t)
		require.GreaterOrEqual(t, b.provider.callCount(), 3)
	})

	t.Run("ContextEndStopsLoop", func(t *testing.T) {
		t.Parallel()
		b := setupPoller(t, PollerConfig{Interval: time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, b.poller.Start(ctx))
		b.next(t)
		cancel()
		b.poller.Stop() // returns only once the loop has ended
	})

	t.Run("StopBeforeStartAndTwice", func(t *testing.T) {
		t.Parallel()
		b := setupPoller(t, PollerConfig{Interval: time.Hour})
		b.poller.Stop()
		require.NoError(t, b.poller.Start(context.Background()))
		require.NoError(t, b.poller.Start(context.Background()), "second Start is a no-op")
		b.next(t)
		b.poller.Stop()
		b.poller.Stop()
		require.NoError(t, b.poller.Start(context.Background()), "restart after Stop")
		b.next(t)
		b.poller.Stop()
		require.Equal(t, 2, b.provider.callCount())
	})
}

func TestPollerRunOnce(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		b := setupPoller(t, PollerConfig{})
		snap, err := b.poller.runOnce(context.Background())
		require.NoError(t, err)
		require.Len(t, snap.GPUs, 2)
		require.Equal(t, snap, b.next(t))
		latest, ok := b.poller.Latest()
		require.True(t, ok)
		require.Equal(t, snap, latest)
	})

	t.Run("ProviderErrorKeepsPreviousSnapshot", func(t *testing.T) {
		t.Parallel()
		b := setupPoller(t, PollerConfig{})
		first, err := b.poller.runOnce(context.Background())
		require.NoError(t, err)
		b.provider.errs = []error{errors.New("nvml hiccup")}
		_, err = b.poller.runOnce(context.Background())
		require.ErrorContains(t, err, "read gpu telemetry: nvml hiccup")
		latest, ok := b.poller.Latest()
		require.True(t, ok)
		require.Equal(t, first, latest)
	})

	t.Run("SinkErrorStillUpdatesLatest", func(t *testing.T) {
		t.Parallel()
		sinkErr := errors.New("db down")
		b := setupPoller(t, PollerConfig{Sink: func(context.Context, Snapshot) error { return sinkErr }})
		snap, err := b.poller.runOnce(context.Background())
		require.ErrorIs(t, err, sinkErr)
		require.ErrorContains(t, err, "sink gpu telemetry")
		latest, ok := b.poller.Latest()
		require.True(t, ok)
		require.Equal(t, snap, latest)
	})

	t.Run("TimeoutReachesProviderAndSink", func(t *testing.T) {
		t.Parallel()
		var deadline time.Time
		b := setupPoller(t, PollerConfig{Timeout: time.Minute, Sink: func(ctx context.Context, _ Snapshot) error {
			deadline, _ = ctx.Deadline()
			return nil
		}})
		_, err := b.poller.runOnce(context.Background())
		require.NoError(t, err)
		require.WithinDuration(t, time.Now().Add(time.Minute), deadline, 10*time.Second)
	})

	t.Run("NilSink", func(t *testing.T) {
		t.Parallel()
		p, err := NewPoller(&fakeProvider{name: SourceNone}, PollerConfig{Logger: quiet})
		require.NoError(t, err)
		_, err = p.runOnce(context.Background())
		require.NoError(t, err)
		_, ok := p.Latest()
		require.True(t, ok)
	})
}

func TestNewPoller(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		p, err := NewPoller(&fakeProvider{}, PollerConfig{})
		require.NoError(t, err)
		require.Equal(t, PollerIntervalDefault, p.cfg.Interval)
		require.Equal(t, PollerJitterDefault, p.cfg.Jitter)
		require.Equal(t, PollerIntervalDefault, p.cfg.Timeout)
	})

	invalid := []struct {
		name     string
		provider Provider
		cfg      PollerConfig
		wantErr  string
	}{
		{"NilProvider", nil, PollerConfig{}, "provider is nil"},
		{"NegativeInterval", &fakeProvider{}, PollerConfig{Interval: -time.Second}, "interval -1s must not be negative"},
		{"NegativeTimeout", &fakeProvider{}, PollerConfig{Timeout: -time.Second}, "timeout -1s must not be negative"},
		{"JitterTooLarge", &fakeProvider{}, PollerConfig{Jitter: 1}, "jitter 1 must be in [0, 1)"},
		{"NegativeJitter", &fakeProvider{}, PollerConfig{Jitter: -0.1}, "jitter"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewPoller(tc.provider, tc.cfg)
			require.ErrorContains(t, err, "new telemetry poller: "+tc.wantErr)
		})
	}
}
