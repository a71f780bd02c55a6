package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSimGPUs(t *testing.T) {
	t.Parallel()

	valid := []struct {
		spec string
		want []int64
	}{
		{"24576", []int64{24576}},
		{"2x24576", []int64{24576, 24576}},
		{"2X24576", []int64{24576, 24576}},
		{"24576,81920", []int64{24576, 81920}},
		{" 2 x 24576 , 81920 ", []int64{24576, 24576, 81920}},
		{"64x1", make64(1)},
	}
	for _, tc := range valid {
		t.Run("Valid"+tc.spec, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSimGPUs(tc.spec)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	invalid := []struct {
		name, spec, wantErr string
	}{
		{"Empty", "", "empty spec"},
		{"Blank", "  ", "empty spec"},
		{"BadMemory", "2xabc", `part 1 "2xabc": memory "abc"`},
		{"BadCount", "twox24576", `part 1 "twox24576": count "two"`},
		{"ZeroCount", "0x24576", `count "0"`},
		{"ZeroMemory", "24576,0", `part 2 "0": memory "0"`},
		{"NegativeMemory", "-5", `memory "-5"`},
		{"EmptyPart", "24576,,81920", `part 2 "": memory ""`},
		{"MissingMemory", "2x", `part 1 "2x": memory ""`},
		{"TooBig", "99999999999", "memory"},
		{"TooMany", "60x1,5x1", `part 2 "5x1": more than 64 gpus`},
		{"Units", "24GiB", `memory "24GiB"`},
	}
	for _, tc := range invalid {
		t.Run("Invalid"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSimGPUs(tc.spec)
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorContains(t, err, "parse simulated gpus")
			_, err = NewSimulated("node-a", tc.spec)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func make64(mb int64) []int64 {
	out := make([]int64, 64)
	for i := range out {
		out[i] = mb
	}
	return out
}

func newSim(t *testing.T, spec string) *Simulated {
	t.Helper()
	s, err := NewSimulated("node-a", spec)
	require.NoError(t, err)
	return s
}

func simGPUAt(t *testing.T, s *Simulated, index int) GPU {
	t.Helper()
	snap, err := s.Snapshot(context.Background())
	require.NoError(t, err)
	g, ok := snap.GPU(index)
	require.True(t, ok, "gpu %d not in snapshot", index)
	return g
}

func TestSimulated(t *testing.T) {
	t.Parallel()

	t.Run("Snapshot", func(t *testing.T) {
		t.Parallel()
		s := newSim(t, "24576,81920")
		snap, err := s.Snapshot(context.Background())
		require.NoError(t, err)
		require.Equal(t, "node-a", snap.NodeID)
		require.Equal(t, SourceSimulated, snap.Source)
		require.Equal(t, SourceSimulated, s.Name())
		require.False(t, snap.Taken.IsZero())
		require.Equal(t, []GPU{
			{Index: 0, UUID: "GPU-sim-node-a-0", Name: "Simulated GPU", MemoryTotalMB: 24576, MemoryFreeMB: 24576, TemperatureC: 30, PowerWatts: 50, MIG: MIGDisabled},
			{Index: 1, UUID: "GPU-sim-node-a-1", Name: "Simulated GPU", MemoryTotalMB: 81920, MemoryFreeMB: 81920, TemperatureC: 30, PowerWatts: 50, MIG: MIGDisabled},
		}, snap.GPUs)
		require.Equal(t, SimDriverVersion, snap.DriverVersion)
		require.NoError(t, s.Close())
	})

	t.Run("ReserveAndReleaseMoveUsage", func(t *testing.T) {
		t.Parallel()
		s := newSim(t, "2x1000")
		require.NoError(t, s.Reserve(1, 250))
		require.NoError(t, s.Reserve(1, 250))
		g := simGPUAt(t, s, 1)
		require.Equal(t, int64(500), g.MemoryUsedMB)
		require.Equal(t, int64(500), g.MemoryFreeMB)
		require.Equal(t, 50, g.UtilizationPct)
		require.Equal(t, 55, g.TemperatureC)
		require.Equal(t, 175.0, g.PowerWatts)
		require.Equal(t, int64(0), simGPUAt(t, s, 0).MemoryUsedMB, "other gpu untouched")

		err := s.Reserve(1, 501)
		require.ErrorIs(t, err, ErrInsufficientMemory)
		require.ErrorContains(t, err, "reserve simulated gpu 1")
		require.Equal(t, int64(500), simGPUAt(t, s, 1).MemoryUsedMB, "failed reserve changes nothing")

		require.NoError(t, s.Release(1, 200))
		require.Equal(t, int64(300), simGPUAt(t, s, 1).MemoryUsedMB)
		require.NoError(t, s.Release(1, 10_000), "over-release clamps")
		g = simGPUAt(t, s, 1)
		require.Equal(t, int64(0), g.MemoryUsedMB)
		require.Equal(t, int64(1000), g.MemoryFreeMB)
	})

	t.Run("SetUsed", func(t *testing.T) {
		t.Parallel()
		s := newSim(t, "1000")
		require.NoError(t, s.SetUsed(0, 950))
		g := simGPUAt(t, s, 0)
		require.Equal(t, int64(950), g.MemoryUsedMB)
		require.Equal(t, int64(50), g.MemoryFreeMB)
		require.Equal(t, 95, g.UtilizationPct)
		require.ErrorContains(t, s.SetUsed(0, 1001), "more than the 1000 MB total")
		require.NoError(t, s.SetUsed(0, 0))
		require.Equal(t, int64(0), simGPUAt(t, s, 0).MemoryUsedMB)
	})

	t.Run("SetLost", func(t *testing.T) {
		t.Parallel()
		s := newSim(t, "3x1000")
		require.NoError(t, s.SetLost(1, true))
		snap, err := s.Snapshot(context.Background())
		require.NoError(t, err)
		require.Len(t, snap.GPUs, 2)
		_, ok := snap.GPU(1)
		require.False(t, ok)
		require.Equal(t, []LostGPU{{Index: 1, UUID: "GPU-sim-node-a-1", Reason: "simulated: gpu is lost"}}, snap.Lost)
		require.NoError(t, s.SetLost(1, false))
		require.Len(t, simGPUs(t, s), 3)
	})

	t.Run("BadArguments", func(t *testing.T) {
		t.Parallel()
		s := newSim(t, "2x1000")
		for _, err := range []error{s.Reserve(2, 1), s.Release(-1, 1), s.SetUsed(5, 1), s.SetLost(2, true)} {
			require.ErrorIs(t, err, ErrNoSuchGPU)
		}
		require.ErrorContains(t, s.Reserve(0, -1), "negative memory")
		require.ErrorContains(t, s.Release(0, -1), "negative memory")
		require.ErrorContains(t, s.SetUsed(0, -1), "negative memory")
	})

	t.Run("CanceledContext", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := newSim(t, "1000").Snapshot(ctx)
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("ConcurrentReserveRelease", func(t *testing.T) {
		t.Parallel()
		const workers, rounds = 16, 200
		s := newSim(t, "2x1000")
		var wg sync.WaitGroup
		errs := make(chan error, workers*rounds)
		for w := range workers {
			wg.Go(func() {
				for r := range rounds {
					idx := (w + r) % 2
					// Reservations may fail when the GPU is full; releases always succeed.
					if err := s.Reserve(idx, 100); err == nil {
						if err := s.Release(idx, 100); err != nil {
							errs <- fmt.Errorf("release: %w", err)
						}
					} else if !isInsufficient(err) {
						errs <- err
					}
					snap, err := s.Snapshot(context.Background())
					if err != nil {
						errs <- err
						continue
					}
					for _, g := range snap.GPUs {
						if g.MemoryFreeMB < 0 || g.MemoryUsedMB > g.MemoryTotalMB || g.MemoryUsedMB+g.MemoryFreeMB != g.MemoryTotalMB {
							errs <- fmt.Errorf("gpu %d inconsistent: %+v", g.Index, g)
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for _, g := range simGPUs(t, s) {
			require.Equal(t, int64(0), g.MemoryUsedMB, "every reservation was released")
		}
	})
}

func isInsufficient(err error) bool { return err != nil && errors.Is(err, ErrInsufficientMemory) }

func simGPUs(t *testing.T, s *Simulated) []GPU {
	t.Helper()
	snap, err := s.Snapshot(context.Background())
	require.NoError(t, err)
	return snap.GPUs
}
