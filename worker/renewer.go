package worker

import (
	"context"
	"time"

	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/wire"
)

// renewFirstTimeout bounds the renewal Run makes before it starts reading: the first claim
// places GPU jobs by the telemetry it reports, but an orchestrator that does not answer must
// not keep the worker from starting (claims of CPU jobs need no telemetry).
const renewFirstTimeout = 5 * time.Second

// renewLoop keeps the worker's leases alive: every renewInterval it renews the leases of every
// held job in one call that also carries the node's telemetry, stops the jobs whose leases are
// gone, and asks the toucher to reset the idle time of their stream entries so that the
// reclaimer leaves them alone. A failed call is logged and retried at the next tick: with TTL/3
// between renewals, two may fail before a lease expires.
//
// The renewals never wait on Redis: the touches run in the toucher's own goroutine, with their
// own deadline, so a Redis that hangs (stopped, not gone: every call waits for its read
// timeout) delays no renewal.
func (w *Worker) renewLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	touch := newToucher(w)
	touchDone := make(chan struct{})
	go func() {
		defer close(touchDone)
		touch.run(ctx)
	}()
	defer func() { <-touchDone }()
	t := time.NewTimer(w.renewInterval())
	defer t.Stop()
	for {
		now := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.renewNow:
			now = true
		}
		err := w.renewOnce(ctx)
		if now && err == nil && w.cfg.Telemetry != nil {
			// Results released leases while entries wait for room (deferred.go): the node's
			// memory is reported now rather than at the next tick, and twice, so that the
			// second report shows what the first one's answer freed (a simulated GPU follows
			// the reservations it is told). Then the deferred entries try.
			err = w.renewOnce(ctx)
		}
		if err != nil && ctx.Err() == nil {
			w.log.Warn("renew leases failed; retrying at the next tick", "error", err)
		}
		if now {
			w.deferred.poke()
		}
		touch.poke()
		t.Reset(w.renewInterval())
	}
}

// renewFirst is the renewal before the first read, when the worker reports telemetry.
func (w *Worker) renewFirst(ctx context.Context) {
	if w.cfg.Telemetry == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, renewFirstTimeout)
	defer cancel()
	if err := w.renewOnce(ctx); err != nil {
		w.log.Warn("first telemetry report failed; GPU jobs wait for the next", "error", err)
	}
}

// renewInterval is a third of the shortest lease TTL held (LeaseTTL when none says), at most
// TelemetryInterval when the worker reports telemetry and at most TouchInterval.
func (w *Worker) renewInterval() time.Duration {
	ttl := w.cfg.LeaseTTL
	w.mu.Lock()
	for r := range w.held {
		if r.leaseTTL > 0 {
			ttl = min(ttl, r.leaseTTL)
		}
	}
	w.mu.Unlock()
	d := ttl / 3
	if w.cfg.Telemetry != nil {
		d = min(d, w.cfg.TelemetryInterval)
	}
	if w.cfg.TouchInterval > 0 {
		d = min(d, w.cfg.TouchInterval)
	}
	return max(d, renewIntervalMin)
}

// renewOnce renews the held leases, reports telemetry and stops the jobs whose leases are gone.
// It makes no Redis call (the toucher touches the entries).
func (w *Worker) renewOnce(ctx context.Context) error {
	w.mu.Lock()
	runs := make([]*run, 0, len(w.held))
	for r := range w.held {
		runs = append(runs, r)
	}
	w.mu.Unlock()
	req := wire.RenewRequest{WorkerID: w.cfg.WorkerID, NodeID: w.cfg.NodeID, Tokens: []string{}}
	for _, r := range runs {
		if r.job.LeaseToken != "" && !r.leaseGone.Load() {
			req.Tokens = append(req.Tokens, r.job.LeaseToken)
		}
	}
	var sim *telemetry.Simulated
	if w.cfg.Telemetry != nil {
		snap, err := w.cfg.Telemetry.Snapshot(ctx)
		if err != nil {
			w.log.Warn("read gpu telemetry failed; renewing without it", "error", err)
		} else {
			req.Telemetry = telemetryToWire(snap, w.cfg.NodeID)
		}
		sim, _ = w.cfg.Telemetry.(*telemetry.Simulated)
	}
	var err error
	if len(req.Tokens) > 0 || req.Telemetry != nil {
		var resp wire.RenewResponse
		if resp, err = w.cfg.API.RenewLeases(ctx, req); err == nil {
			w.dropGone(runs, resp.Gone)
			if sim != nil {
				followReserved(sim, resp.Reserved)
			}
		}
	}
	return err
}

// dropGone marks the runs whose leases are gone and cancels the handlers still running: the
// jobs were rescued (the lease expired) or cancelled (the lease was released), and belong to no
// one here.
//
// A run whose handler has returned is only marked. Its result is on its way, and usually that
// result is what released the lease, in a round that ended while the renewal was in flight;
// when it was not, the result's outcome says so (lease_expired). A run no longer held was
// acknowledged since the renewal was sent, and is left alone.
func (w *Worker) dropGone(runs []*run, gone []wire.GoneLease) {
	if len(gone) == 0 {
		return
	}
	byToken := make(map[string]wire.GoneLease, len(gone))
	for _, g := range gone {
		byToken[g.Token] = g
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range runs {
		g, ok := byToken[r.job.LeaseToken]
		if _, held := w.held[r]; !ok || !held || r.leaseGone.Swap(true) {
			continue
		}
		if w.running[r.job.ID] != r {
			w.log.Debug("lease gone after the job's handler returned", "job_id", r.job.ID,
				"attempt", r.job.Attempt, "lease_token", r.job.LeaseToken, "lease_status", g.Status)
			continue
		}
		w.log.Warn("lease gone; stopping the job", "job_id", r.job.ID, "attempt", r.job.Attempt,
			"lease_token", r.job.LeaseToken, "lease_status", g.Status)
		r.cancel(errLeaseLost)
	}
}

// followReserved makes simulated GPUs show as used what the node's leases reserve (the
// orchestrator's answer), the same level-based model as the orchestrator's own simulated node:
// every process reporting a simulated node reports the same usage.
func followReserved(sim *telemetry.Simulated, reserved []wire.GPUReservation) {
	snap, err := sim.Snapshot(context.Background())
	if err != nil {
		return
	}
	byIndex := make(map[int]int64, len(reserved))
	for _, r := range reserved {
		byIndex[r.GPUIndex] = r.ReservedMB
	}
	for _, g := range snap.GPUs {
		_ = sim.SetUsed(g.Index, min(max(byIndex[g.Index], 0), g.MemoryTotalMB)) // index from the snapshot: cannot fail
	}
}

// telemetryToWire converts a snapshot for the renew call; the node is the worker's.
func telemetryToWire(s telemetry.Snapshot, nodeID string) *wire.NodeTelemetry {
	out := &wire.NodeTelemetry{NodeID: nodeID, Taken: s.Taken.UTC(), Source: s.Source,
		GPUs: make([]wire.GPUTelemetry, 0, len(s.GPUs)), DriverVersion: s.DriverVersion, CUDAVersion: s.CUDAVersion}
	for _, g := range s.GPUs {
		out.GPUs = append(out.GPUs, wire.GPUTelemetry{Index: g.Index, UUID: g.UUID, Name: g.Name,
			MemoryTotalMB: g.MemoryTotalMB, MemoryUsedMB: g.MemoryUsedMB, UtilizationPct: g.UtilizationPct,
			TemperatureC: g.TemperatureC, PowerWatts: g.PowerWatts, MIG: g.MIG})
	}
	for _, g := range s.Lost {
		out.Lost = append(out.Lost, wire.LostGPUTelemetry{Index: g.Index, UUID: g.UUID, Reason: g.Reason})
	}
	return out
}
