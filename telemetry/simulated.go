package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits of a simulated node.
const (
	// SimMaxGPUs is the most GPUs a simulated node may have.
	SimMaxGPUs = 64
	// SimMaxMemoryMB is the largest simulated GPU (16 TiB), a guard against typos.
	SimMaxMemoryMB = 16 << 20
)

// SimDriverVersion is the driver version a simulated node reports, so that its gpu.driver
// label says the GPUs are not real.
const SimDriverVersion = "sim"

// Simulated is a provider for hosts without GPUs (development, CI, load tests): it reports the
// GPUs of a spec (ORCH_SIM_GPUS) whose used memory follows the reservations made through
// Reserve and Release, so placement and admission can be exercised end to end. Utilization,
// temperature and power are derived from the used fraction: idle 0 %, 30 °C, 50 W; full 100 %,
// 80 °C, 300 W. UUIDs are deterministic ("GPU-sim-<node>-<index>"). Safe for concurrent use.
type Simulated struct {
	nodeID string

	mu   sync.Mutex
	gpus []simGPU
}

type simGPU struct {
	totalMB, usedMB int64
	lost            bool
}

// NewSimulated returns a simulated node with the GPUs of spec (see ParseSimGPUs), all idle.
func NewSimulated(nodeID string, spec string) (*Simulated, error) {
	sizes, err := ParseSimGPUs(spec)
	if err != nil {
		return nil, err
	}
	s := &Simulated{nodeID: nodeID, gpus: make([]simGPU, len(sizes))}
	for i, mb := range sizes {
		s.gpus[i].totalMB = mb
	}
	return s, nil
}

// ParseSimGPUs parses a simulated GPU spec into the memory (MB) of each GPU. A spec is a comma
// list of parts; a part is either a memory size ("24576") or a count and a size ("2x24576"), so
// "2x24576", "24576,81920" and "2x24576,81920" (three GPUs) are all valid. Errors name the part.
func ParseSimGPUs(spec string) ([]int64, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("parse simulated gpus: empty spec, want e.g. 2x24576 or 24576,81920")
	}
	var sizes []int64
	for i, raw := range strings.Split(spec, ",") {
		part := strings.TrimSpace(raw)
		count, size := int64(1), part
		if c, m, ok := strings.Cut(strings.ToLower(part), "x"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(c), 10, 64)
			if err != nil || n <= 0 || n > SimMaxGPUs {
				return nil, fmt.Errorf("parse simulated gpus: part %d %q: count %q is not an integer in 1..%d",
					i+1, part, strings.TrimSpace(c), SimMaxGPUs)
			}
			count, size = n, strings.TrimSpace(m)
		}
		mb, err := strconv.ParseInt(size, 10, 64)
		if err != nil || mb <= 0 || mb > SimMaxMemoryMB {
			return nil, fmt.Errorf("parse simulated gpus: part %d %q: memory %q is not a size in MB in 1..%d",
				i+1, part, size, SimMaxMemoryMB)
		}
		if int64(len(sizes))+count > SimMaxGPUs {
			return nil, fmt.Errorf("parse simulated gpus: part %d %q: more than %d gpus", i+1, part, SimMaxGPUs)
		}
		for range count {
			sizes = append(sizes, mb)
		}
	}
	return sizes, nil
}

// Name returns "simulated".
func (s *Simulated) Name() string { return SourceSimulated }

// Close does nothing; a simulated node keeps answering.
func (s *Simulated) Close() error { return nil }

// Snapshot returns the current simulated state.
func (s *Simulated) Snapshot(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{NodeID: s.nodeID, Taken: time.Now(), GPUs: make([]GPU, 0, len(s.gpus)), Source: SourceSimulated,
		DriverVersion: SimDriverVersion}
	for i, g := range s.gpus {
		uuid := fmt.Sprintf("GPU-sim-%s-%d", s.nodeID, i)
		if g.lost {
			snap.Lost = append(snap.Lost, LostGPU{Index: i, UUID: uuid, Reason: "simulated: gpu is lost"})
			continue
		}
		util := int(g.usedMB * 100 / g.totalMB)
		snap.GPUs = append(snap.GPUs, GPU{
			Index:          i,
			UUID:           uuid,
			Name:           "Simulated GPU",
			MemoryTotalMB:  g.totalMB,
			MemoryUsedMB:   g.usedMB,
			MemoryFreeMB:   g.totalMB - g.usedMB,
			UtilizationPct: util,
			TemperatureC:   30 + util/2,
			PowerWatts:     50 + 2.5*float64(util),
			MIG:            MIGDisabled,
		})
	}
	return snap, nil
}

// Reserve marks mb more memory of GPU index as used (a lease was granted). It fails with
// ErrInsufficientMemory, changing nothing, when the GPU has less than mb free.
func (s *Simulated) Reserve(index int, mb int64) error {
	return s.update(index, mb, "reserve", func(g *simGPU) error {
		if free := g.totalMB - g.usedMB; mb > free {
			return fmt.Errorf("%w: %d MB wanted, %d MB free", ErrInsufficientMemory, mb, free)
		}
		g.usedMB += mb
		return nil
	})
}

// Release returns mb of GPU index's memory (a lease ended). Releasing more than is used
// leaves the GPU idle rather than failing, so a repeated release after a restart is harmless.
func (s *Simulated) Release(index int, mb int64) error {
	return s.update(index, mb, "release", func(g *simGPU) error {
		g.usedMB = max(g.usedMB-mb, 0)
		return nil
	})
}

// SetUsed sets the used memory of GPU index outright, e.g. to push it to 95 % in a test of the
// memory-pressure gate. mb must be within 0..total.
func (s *Simulated) SetUsed(index int, mb int64) error {
	return s.update(index, mb, "set used memory of", func(g *simGPU) error {
		if mb > g.totalMB {
			return fmt.Errorf("%d MB is more than the %d MB total", mb, g.totalMB)
		}
		g.usedMB = mb
		return nil
	})
}

// SetLost marks GPU index lost (or found again): a lost GPU leaves Snapshot.GPUs for
// Snapshot.Lost, as a GPU that fell off the bus does under NVML.
func (s *Simulated) SetLost(index int, lost bool) error {
	return s.update(index, 0, "set lost state of", func(g *simGPU) error {
		g.lost = lost
		return nil
	})
}

// update applies fn to GPU index under the lock, after checking the index and mb.
func (s *Simulated) update(index int, mb int64, verb string, fn func(g *simGPU) error) error {
	if mb < 0 {
		return fmt.Errorf("%s simulated gpu %d: negative memory %d MB", verb, index, mb)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if index < 0 || index >= len(s.gpus) {
		return fmt.Errorf("%s simulated gpu %d: %w (node has %d)", verb, index, ErrNoSuchGPU, len(s.gpus))
	}
	if err := fn(&s.gpus[index]); err != nil {
		return fmt.Errorf("%s simulated gpu %d: %w", verb, index, err)
	}
	return nil
}
