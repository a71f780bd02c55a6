package admission

import (
	"sort"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// Pressure is the GPU memory in use across the cluster at one moment, from gpu_devices.
//
// A GPU counts when its telemetry is fresh (younger than the freshness window) and it is not
// lost: a node that stopped reporting must not hold the gate closed (or open) with what it
// said minutes ago. A GPU's use is max(memory used, memory reserved by active leases): a lease
// promises its memory before the job has allocated it, which is exactly the window in which
// admitting more GPU work would overcommit the cluster.
type Pressure struct {
	MeasuredAt time.Time
	// UsedMB and TotalMB sum the counted GPUs.
	UsedMB  int64
	TotalMB int64
	// Ratio is UsedMB/TotalMB (0 when no GPU counts).
	Ratio float64
	// FreshGPUs counts the GPUs that count; StaleGPUs those skipped for old telemetry (lost
	// GPUs are in neither).
	FreshGPUs int
	StaleGPUs int
	// Nodes is the pressure of every node that reported GPUs, by node id; a node whose GPUs
	// are all stale is listed with Fresh false and does not count.
	Nodes []NodePressure
}

// Known reports whether any GPU has fresh telemetry: without one there is nothing to judge by.
func (p Pressure) Known() bool { return p.FreshGPUs > 0 }

// NodePressure is the pressure of one node's fresh GPUs (or of all of them when none is fresh).
type NodePressure struct {
	NodeID  string
	UsedMB  int64
	TotalMB int64
	Ratio   float64
	GPUs    int
	Fresh   bool
	// Age is the age of the node's newest telemetry.
	Age time.Duration
}

// MeasurePressure computes the pressure of gpus (GPUList of every node) at now.
func MeasurePressure(gpus []store.GPUCapacity, now time.Time, freshness time.Duration) Pressure {
	p := Pressure{MeasuredAt: now}
	type acc struct {
		fresh, all NodePressure
	}
	nodes := map[string]*acc{}
	for _, g := range gpus {
		if g.Lost || g.MemoryTotalMB <= 0 {
			continue
		}
		a := nodes[g.NodeID]
		if a == nil {
			a = &acc{}
			a.all.Age = -1
			nodes[g.NodeID] = a
		}
		used := min(max(g.MemoryUsedMB, g.ReservedMB), g.MemoryTotalMB)
		age := max(now.Sub(g.UpdatedAt), 0)
		if a.all.Age < 0 || age < a.all.Age {
			a.all.Age = age
		}
		a.all.UsedMB += used
		a.all.TotalMB += g.MemoryTotalMB
		a.all.GPUs++
		if age >= freshness {
			p.StaleGPUs++
			continue
		}
		p.FreshGPUs++
		p.UsedMB += used
		p.TotalMB += g.MemoryTotalMB
		a.fresh.UsedMB += used
		a.fresh.TotalMB += g.MemoryTotalMB
		a.fresh.GPUs++
	}
	for id, a := range nodes {
		n := a.all
		if a.fresh.GPUs > 0 {
			n.UsedMB, n.TotalMB, n.GPUs, n.Fresh = a.fresh.UsedMB, a.fresh.TotalMB, a.fresh.GPUs, true
		}
		n.NodeID = id
		n.Ratio = ratio(n.UsedMB, n.TotalMB)
		p.Nodes = append(p.Nodes, n)
	}
	sort.Slice(p.Nodes, func(i, j int) bool { return p.Nodes[i].NodeID < p.Nodes[j].NodeID })
	p.Ratio = ratio(p.UsedMB, p.TotalMB)
	return p
}

func ratio(used, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64(used) / float64(total)
}

// GPUGate closes admission of GPU work while the cluster's GPU memory is near full, with
// hysteresis: it closes when the pressure is above the high watermark, and reopens only once
// the pressure is below the low watermark and the hold period has passed since the pressure
// was last seen above the high one. Between the watermarks it keeps its state, so a cluster
// hovering around one threshold does not flap. Safe for concurrent use.
type GPUGate struct {
	high, low       float64 // fractions
	highPct, lowPct float64 // as configured, for State
	hold            time.Duration

	mu          sync.RWMutex
	closed      bool
	closedSince time.Time
	holdUntil   time.Time
	last        Pressure
}

// NewGPUGate returns an open gate; highPct and lowPct are percentages.
func NewGPUGate(highPct, lowPct float64, hold time.Duration) *GPUGate {
	return &GPUGate{high: highPct / 100, low: lowPct / 100, highPct: highPct, lowPct: lowPct, hold: hold}
}

// Observe feeds one measurement into the gate and reports whether the gate changed state. A
// measurement without fresh GPUs changes nothing: the gate keeps its state until there is
// telemetry to judge by.
func (g *GPUGate) Observe(p Pressure) (changed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last = p
	if !p.Known() {
		return false
	}
	now := p.MeasuredAt
	switch {
	case p.Ratio > g.high:
		g.holdUntil = now.Add(g.hold)
		if !g.closed {
			g.closed, g.closedSince = true, now
			return true
		}
	case g.closed && p.Ratio < g.low && !now.Before(g.holdUntil):
		g.closed = false
		return true
	}
	return false
}

// Closed reports whether GPU work is refused, and for how long at least (the rest of the hold;
// zero once the hold has passed and only the pressure keeps the gate closed).
func (g *GPUGate) Closed(now time.Time) (closed bool, holdLeft time.Duration) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !g.closed {
		return false, 0
	}
	return true, max(g.holdUntil.Sub(now), 0)
}

// GPUGateState is a snapshot of the gate for GET /control/admission.
type GPUGateState struct {
	Closed      bool
	ClosedSince time.Time // zero when open
	HoldUntil   time.Time // zero when open
	HighPct     float64
	LowPct      float64
	Hold        time.Duration
	Pressure    Pressure
}

// State returns the gate's state and its last measurement.
func (g *GPUGate) State() GPUGateState {
	g.mu.RLock()
	defer g.mu.RUnlock()
	s := GPUGateState{Closed: g.closed, HighPct: g.highPct, LowPct: g.lowPct, Hold: g.hold, Pressure: g.last}
	if g.closed {
		s.ClosedSince, s.HoldUntil = g.closedSince, g.holdUntil
	}
	return s
}
