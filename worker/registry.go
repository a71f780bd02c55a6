package worker

import (
	"context"
	"errors"
	"net/http"
	"os"
	"sort"
	"time"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/wire"
)

// Registrar is the part of the API that keeps the worker registry. *client.Client implements
// it.
type Registrar interface {
	RegisterWorker(ctx context.Context, req wire.RegisterWorkerRequest) (wire.WorkerInstruction, error)
	WorkerHeartbeat(ctx context.Context, id string, req wire.WorkerHeartbeatRequest) (wire.WorkerInstruction, error)
	DeregisterWorker(ctx context.Context, id string) error
}

// HeartbeatIntervalDefault is how often a worker heartbeats until its registration says
// otherwise.
const HeartbeatIntervalDefault = config.PoolsHeartbeatIntervalDefault

// registryCallTimeout bounds one registration, heartbeat or deregistration.
const registryCallTimeout = 10 * time.Second

// Causes of Run's end other than its context.
var (
	errDrainOrdered = errors.New("drain ordered by the orchestrator")
	errStopOrdered  = errors.New("stop ordered by the orchestrator")
)

// membership is the worker's life in the registry: it registers, heartbeats every interval
// (status, jobs in flight, claimed total, telemetry) and obeys the answer's instruction.
type membership struct {
	w        *Worker
	end      context.CancelCauseFunc // ends Run's context: the worker drains
	done     chan struct{}           // closed when the heartbeat loop returned
	interval time.Duration
	// registered is owned by the loop goroutine until done is closed.
	registered bool
	ordered    string // the last instruction obeyed
}

// startMembership registers the worker and heartbeats in the background (nothing when
// Config.Registrar is nil). It returns the context Run serves under: ctx, also ended by a drain
// or stop order; and leave, which Run defers: it stops the heartbeats and deregisters, so that
// a worker that exits cleanly is gone from the registry at once.
func (w *Worker) startMembership(ctx context.Context) (context.Context, func()) {
	if w.cfg.Registrar == nil {
		return ctx, func() {}
	}
	runCtx, end := context.WithCancelCause(ctx)
	loopCtx, stopLoop := context.WithCancel(context.WithoutCancel(ctx))
	m := &membership{w: w, end: end, done: make(chan struct{}), interval: w.cfg.HeartbeatInterval}
	go m.loop(loopCtx, runCtx)
	return runCtx, func() {
		stopLoop()
		<-m.done
		m.deregister()
		end(nil)
	}
}

// loop heartbeats until ctx ends; failed calls are retried with backoff (at most one interval
// apart), so an orchestrator that restarts finds its workers again within an interval.
func (m *membership) loop(ctx, runCtx context.Context) {
	defer close(m.done)
	t := time.NewTimer(0)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		in, err := m.beat(ctx, runCtx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			fails++
			m.w.log.Warn("worker heartbeat failed; retrying", "error", err, "tries", fails)
			t.Reset(min(backoff(fails-1, m.w.cfg.RetryMin, m.w.cfg.RetryMax), m.interval))
			continue
		}
		fails = 0
		m.obey(in)
		// ± 10%, so that workers started together do not heartbeat in lockstep.
		t.Reset(m.interval - m.interval/10 + jitter(m.interval/5))
	}
}

// beat registers the worker when it is not (or no longer) known, and heartbeats otherwise.
func (m *membership) beat(ctx, runCtx context.Context) (wire.WorkerInstruction, error) {
	ctx, cancel := context.WithTimeout(ctx, registryCallTimeout)
	defer cancel()
	if m.registered {
		in, err := m.w.cfg.Registrar.WorkerHeartbeat(ctx, m.w.cfg.WorkerID, m.heartbeat(ctx, runCtx))
		if !client.IsStatus(err, http.StatusNotFound) {
			return in, err
		}
		// The registry forgot this worker (it was silent too long): register again.
		m.w.log.Info("worker unknown to the registry; registering again")
		m.registered = false
	}
	in, err := m.w.cfg.Registrar.RegisterWorker(ctx, m.registration())
	if err != nil {
		return in, err
	}
	m.registered = true
	m.w.log.Info("worker registered", "pool_id", m.w.cfg.PoolID, "instruction", in.Instruction,
		"heartbeat_interval", time.Duration(in.HeartbeatInterval).String())
	return in, nil
}

func (m *membership) registration() wire.RegisterWorkerRequest {
	host := m.w.cfg.Hostname
	if host == "" {
		host, _ = os.Hostname()
	}
	types := make([]string, 0, len(m.w.types))
	for name := range m.w.types {
		types = append(types, name)
	}
	sort.Strings(types)
	// Always the full set, {} for none: the registry then forgets labels removed from the
	// configuration.
	labels := m.w.cfg.NodeLabels
	if labels == nil {
		labels = map[string]string{}
	}
	return wire.RegisterWorkerRequest{WorkerID: m.w.cfg.WorkerID, PoolID: m.w.cfg.PoolID,
		NodeID: m.w.cfg.NodeID, Hostname: host, PID: os.Getpid(), Types: types, Concurrency: m.w.cfg.Concurrency,
		NodeLabels: labels, WarmModel: m.w.warmModel}
}

// heartbeat is the worker's state now; the telemetry snapshot when it reads the node's GPUs.
func (m *membership) heartbeat(ctx, runCtx context.Context) wire.WorkerHeartbeatRequest {
	inFlight := m.w.runningCount()
	req := wire.WorkerHeartbeatRequest{Status: wire.WorkerIdle, InFlight: inFlight,
		JobsClaimed: m.w.claimed.Load()}
	switch {
	case runCtx.Err() != nil:
		req.Status = wire.WorkerDraining
	case inFlight > 0:
		req.Status = wire.WorkerExecuting
	}
	if m.w.cfg.Telemetry != nil {
		if snap, err := m.w.cfg.Telemetry.Snapshot(ctx); err == nil {
			req.Telemetry = telemetryToWire(snap, m.w.cfg.NodeID)
		}
	}
	return req
}

// obey applies an answer: the heartbeat interval, and a drain or stop order. Drain ends Run's
// context (Run then stops reading, lets the jobs in flight finish within ShutdownGrace, reports
// them, which releases their leases, and returns); stop also cancels the jobs at once.
func (m *membership) obey(in wire.WorkerInstruction) {
	if d := time.Duration(in.HeartbeatInterval); d > 0 {
		m.interval = d
	}
	m.w.preRunTypes.set(in.PreRunTypes)
	if in.Instruction == m.ordered {
		return
	}
	switch in.Instruction {
	case wire.InstructionDrain:
		m.w.log.Info("the orchestrator ordered a drain", "pool_status", in.PoolStatus, "running", m.w.runningCount())
		m.end(errDrainOrdered)
	case wire.InstructionStop:
		m.w.log.Warn("the orchestrator ordered a stop; cancelling the jobs in flight", "pool_status", in.PoolStatus,
			"job_ids", m.w.runningIDs())
		m.w.handlerCancel(errShutdown)
		m.end(errStopOrdered)
	default:
		return
	}
	m.ordered = in.Instruction
}

// deregister removes the worker from the registry (best effort: an orchestrator that does not
// answer marks it offline after a few silent intervals instead).
func (m *membership) deregister() {
	if !m.registered {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(registryCallTimeout, m.w.cfg.FlushTimeout))
	defer cancel()
	if err := m.w.cfg.Registrar.DeregisterWorker(ctx, m.w.cfg.WorkerID); err != nil {
		m.w.log.Warn("deregister worker failed; the registry will mark it offline", "error", err)
		return
	}
	m.w.log.Info("worker deregistered")
}
