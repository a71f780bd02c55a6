package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/internal/logging"
)

// AutoProbeTimeoutDefault bounds the first NVML snapshot Auto takes to count the devices.
const AutoProbeTimeoutDefault = 10 * time.Second

// AutoOptions configure Auto.
type AutoOptions struct {
	// SimGPUs is a simulated GPU spec (ORCH_SIM_GPUS, see ParseSimGPUs) used when NVML is not
	// available or disabled; empty means no simulation.
	SimGPUs string
	// Disable skips NVML altogether (ORCH_NVML_DISABLE), e.g. to simulate GPUs on a development
	// machine that has one, or to run a GPU host as a CPU-only node.
	Disable bool
	// NVML are the options passed to NewNVML.
	NVML NVMLOptions
	// Logger receives the choice (default slog.Default()).
	Logger *slog.Logger

	// loadNVML replaces NewNVML in tests.
	loadNVML func(nodeID string, opts NVMLOptions) (Provider, error)
}

// Auto picks the telemetry provider of this node, in order:
//
//  1. NVML, unless Disable is set, when the library loads and reports at least one device;
//  2. the simulated provider when SimGPUs is set;
//  3. None: a CPU-only node, whose snapshots are empty.
//
// The only error is a SimGPUs spec that does not parse (checked first, even when NVML wins): a
// misconfigured simulation should stop the process rather than silently run without GPUs. NVML
// failures are logged and fall through.
func Auto(nodeID string, opts AutoOptions) (Provider, error) {
	log := logging.Component(opts.Logger, "telemetry")
	if opts.SimGPUs != "" {
		if _, err := ParseSimGPUs(opts.SimGPUs); err != nil {
			return nil, fmt.Errorf("choose telemetry provider: %w", err)
		}
	}
	load := opts.loadNVML
	if load == nil {
		load = NewNVML
	}
	if opts.Disable {
		log.Info("nvml disabled by configuration")
	} else if p, ok := probeNVML(nodeID, opts.NVML, load, log); ok {
		if opts.SimGPUs != "" {
			log.Warn("sim gpus ignored: nvml found devices", "sim_gpus", opts.SimGPUs)
		}
		log.Info("telemetry provider chosen", "provider", p.Name(), "node_id", nodeID)
		return p, nil
	}
	if opts.SimGPUs != "" {
		p, err := NewSimulated(nodeID, opts.SimGPUs)
		if err != nil {
			return nil, fmt.Errorf("choose telemetry provider: %w", err)
		}
		log.Info("telemetry provider chosen", "provider", p.Name(), "node_id", nodeID, "sim_gpus", opts.SimGPUs)
		return p, nil
	}
	p := NewNone(nodeID)
	log.Info("telemetry provider chosen", "provider", p.Name(), "node_id", nodeID)
	return p, nil
}

// probeNVML loads NVML and keeps it when it reports at least one device (usable or lost).
func probeNVML(nodeID string, opts NVMLOptions, load func(string, NVMLOptions) (Provider, error), log *slog.Logger) (Provider, bool) {
	p, err := load(nodeID, opts)
	if err != nil {
		if errors.Is(err, ErrNVMLUnavailable) {
			log.Info("nvml not available", "error", err)
		} else {
			log.Warn("load nvml", "error", err)
		}
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), AutoProbeTimeoutDefault)
	defer cancel()
	snap, err := p.Snapshot(ctx)
	if err == nil && len(snap.GPUs)+len(snap.Lost) > 0 {
		return p, true
	}
	if err != nil {
		log.Warn("nvml loaded but the first snapshot failed", "error", err)
	} else {
		log.Info("nvml loaded but reports no devices")
	}
	if cerr := p.Close(); cerr != nil {
		log.Warn("close nvml", "error", cerr)
	}
	return nil, false
}
