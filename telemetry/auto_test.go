package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// loader returns a fake NVML loader that yields p (or err) and counts its calls.
func loader(p Provider, err error, calls *int) func(string, NVMLOptions) (Provider, error) {
	return func(string, NVMLOptions) (Provider, error) {
		*calls++
		if err != nil {
			return nil, err
		}
		return p, nil
	}
}

var quiet = slog.New(slog.DiscardHandler)

func TestAuto(t *testing.T) {
	t.Parallel()
	unavailable := fmt.Errorf("init nvml: %w", ErrNVMLUnavailable)

	t.Run("NVMLWhenItLoadsWithDevices", func(t *testing.T) {
		t.Parallel()
		fake, calls := &fakeProvider{name: SourceNVML, gpus: 2}, 0
		p, err := Auto("node-a", AutoOptions{SimGPUs: "2x1000", Logger: quiet, loadNVML: loader(fake, nil, &calls)})
		require.NoError(t, err)
		require.Same(t, fake, p)
		require.Equal(t, 1, calls)
		require.Zero(t, fake.closed.Load())
	})

	t.Run("NVMLWithOnlyLostDevicesStillCounts", func(t *testing.T) {
		t.Parallel()
		lost := &lostOnly{fakeProvider{name: SourceNVML}}
		calls := 0
		p, err := Auto("node-a", AutoOptions{Logger: quiet, loadNVML: loader(lost, nil, &calls)})
		require.NoError(t, err)
		require.Same(t, lost, p)
	})

	t.Run("SimulatedWhenNVMLFails", func(t *testing.T) {
		t.Parallel()
		calls := 0
		p, err := Auto("node-a", AutoOptions{SimGPUs: "2x1000", Logger: quiet, loadNVML: loader(nil, unavailable, &calls)})
		require.NoError(t, err)
		require.Equal(t, 1, calls)
		sim, ok := p.(*Simulated)
		require.True(t, ok, "got %T", p)
		snap, err := sim.Snapshot(context.Background())
		require.NoError(t, err)
		require.Len(t, snap.GPUs, 2)
		require.Equal(t, SourceSimulated, snap.Source)
	})

	t.Run("NoneWhenNeither", func(t *testing.T) {
		t.Parallel()
		calls := 0
		p, err := Auto("node-a", AutoOptions{Logger: quiet, loadNVML: loader(nil, unavailable, &calls)})
		require.NoError(t, err)
		require.IsType(t, &None{}, p)
		snap, err := p.Snapshot(context.Background())
		require.NoError(t, err)
		require.Equal(t, Snapshot{NodeID: "node-a", Taken: snap.Taken, GPUs: []GPU{}, Source: SourceNone}, snap)
		require.Equal(t, SourceNone, p.Name())
		require.NoError(t, p.Close())
	})

	t.Run("OtherLoadErrorsFallThrough", func(t *testing.T) {
		t.Parallel()
		calls := 0
		p, err := Auto("node-a", AutoOptions{Logger: quiet, loadNVML: loader(nil, errors.New("boom"), &calls)})
		require.NoError(t, err)
		require.Equal(t, SourceNone, p.Name())
	})

	t.Run("NVMLWithoutDevicesIsClosedAndSkipped", func(t *testing.T) {
		t.Parallel()
		fake, calls := &fakeProvider{name: SourceNVML}, 0
		p, err := Auto("node-a", AutoOptions{SimGPUs: "1000", Logger: quiet, loadNVML: loader(fake, nil, &calls)})
		require.NoError(t, err)
		require.Equal(t, SourceSimulated, p.Name())
		require.Equal(t, int32(1), fake.closed.Load())
	})

	t.Run("NVMLWhoseFirstSnapshotFailsIsClosedAndSkipped", func(t *testing.T) {
		t.Parallel()
		fake := &fakeProvider{name: SourceNVML, gpus: 8, errs: []error{errors.New("count nvml devices: ERROR_UNKNOWN")}}
		calls := 0
		p, err := Auto("node-a", AutoOptions{Logger: quiet, loadNVML: loader(fake, nil, &calls)})
		require.NoError(t, err)
		require.Equal(t, SourceNone, p.Name())
		require.Equal(t, int32(1), fake.closed.Load())
	})

	t.Run("DisableSkipsNVML", func(t *testing.T) {
		t.Parallel()
		fake, calls := &fakeProvider{name: SourceNVML, gpus: 2}, 0
		p, err := Auto("node-a", AutoOptions{Disable: true, SimGPUs: "1000", Logger: quiet, loadNVML: loader(fake, nil, &calls)})
		require.NoError(t, err)
		require.Zero(t, calls)
		require.Equal(t, SourceSimulated, p.Name())

		p, err = Auto("node-a", AutoOptions{Disable: true, Logger: quiet, loadNVML: loader(fake, nil, &calls)})
		require.NoError(t, err)
		require.Zero(t, calls)
		require.Equal(t, SourceNone, p.Name())
	})

	t.Run("BadSimSpecFailsEvenWithNVML", func(t *testing.T) {
		t.Parallel()
		fake, calls := &fakeProvider{name: SourceNVML, gpus: 2}, 0
		_, err := Auto("node-a", AutoOptions{SimGPUs: "2xabc", Logger: quiet, loadNVML: loader(fake, nil, &calls)})
		require.ErrorContains(t, err, `choose telemetry provider: parse simulated gpus: part 1 "2xabc"`)
		require.Zero(t, calls)
	})

	t.Run("DefaultLoader", func(t *testing.T) {
		t.Parallel()
		// The real NewNVML: on a host without the driver, or in a build without cgo, the
		// simulation wins; on a GPU host NVML does.
		p, err := Auto("node-a", AutoOptions{SimGPUs: "1000", Logger: quiet})
		require.NoError(t, err)
		defer func() { require.NoError(t, p.Close()) }()
		require.Contains(t, []string{SourceNVML, SourceSimulated}, p.Name())
	})
}

// lostOnly is an NVML stand-in whose only device is lost.
type lostOnly struct{ fakeProvider }

func (l *lostOnly) Snapshot(ctx context.Context) (Snapshot, error) {
	snap, err := l.fakeProvider.Snapshot(ctx)
	snap.Lost = []LostGPU{{Index: 0, Reason: "read memory: ERROR_GPU_IS_LOST"}}
	return snap, err
}
