package worker

import (
	"context"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/wire"
)

// fakeRegistrar is the registry side of the API in memory.
type fakeRegistrar struct {
	mu           sync.Mutex
	registers    []wire.RegisterWorkerRequest
	beats        []wire.WorkerHeartbeatRequest
	deregistered int
	instruction  string
	failRegister int  // registrations to refuse with a 503 first
	forget       bool // the next heartbeat answers 404
}

func (f *fakeRegistrar) RegisterWorker(_ context.Context, req wire.RegisterWorkerRequest) (wire.WorkerInstruction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRegister > 0 {
		f.failRegister--
		return wire.WorkerInstruction{}, &client.APIError{StatusCode: http.StatusServiceUnavailable, Code: "unavailable"}
	}
	f.registers = append(f.registers, req)
	return wire.WorkerInstruction{Instruction: f.instruction, HeartbeatInterval: wire.Duration(10 * time.Millisecond)}, nil
}

func (f *fakeRegistrar) WorkerHeartbeat(_ context.Context, _ string, req wire.WorkerHeartbeatRequest) (wire.WorkerInstruction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.forget {
		f.forget = false
		return wire.WorkerInstruction{}, &client.APIError{StatusCode: http.StatusNotFound, Code: "not_found"}
	}
	f.beats = append(f.beats, req)
	return wire.WorkerInstruction{Instruction: f.instruction, HeartbeatInterval: wire.Duration(10 * time.Millisecond)}, nil
}

func (f *fakeRegistrar) DeregisterWorker(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deregistered++
	return nil
}

func (f *fakeRegistrar) order(in string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.instruction = in
}

// snapshot returns copies of what the registrar received.
func (f *fakeRegistrar) snapshot() (regs []wire.RegisterWorkerRequest, beats []wire.WorkerHeartbeatRequest, deregistered int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(regs, f.registers...), append(beats, f.beats...), f.deregistered
}

// runWorker runs a worker until it returns on its own (or ctx ends), and returns a channel with Run's
// result.
func runWorker(t *testing.T, cfg Config) (context.CancelFunc, <-chan error) {
	t.Helper()
	w, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(cancel)
	return cancel, done
}

func waitRun(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not return")
	}
}

func TestMembership(t *testing.T) {
	t.Parallel()

	t.Run("RegistersHeartbeatsAndDeregisters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reg.Register("noop", NoopHandler{})
		reg := &fakeRegistrar{failRegister: 2, forget: true}
		cfg := b.cfg(jobType("noop", "noop"))
		cfg.Registrar, cfg.HeartbeatInterval, cfg.Hostname = reg, 10*time.Millisecond, "gpu-7"
		cfg.NodeLabels = map[string]string{"zone": "a"}
		cancel, done := runWorker(t, cfg)

		b.publish(t, "noop", "noop", `{}`, "j1", "j2")
		require.Eventually(t, func() bool {
			_, beats, _ := reg.snapshot()
			return len(beats) > 0 && beats[len(beats)-1].JobsClaimed == 2
		}, 10*time.Second, 5*time.Millisecond, "heartbeats report the claimed total")
		cancel()
		waitRun(t, done)

		regs, beats, deregistered := reg.snapshot()
		require.Len(t, regs, 2, "registered after two refusals, and again after the registry forgot it")
		require.Equal(t, wire.RegisterWorkerRequest{WorkerID: "w1", PoolID: "p1", NodeID: "n1", Hostname: "gpu-7",
			PID: os.Getpid(), Types: []string{"noop"}, Concurrency: 8, NodeLabels: map[string]string{"zone": "a"}}, regs[0])
		require.Equal(t, wire.WorkerIdle, beats[0].Status)
		require.Equal(t, 1, deregistered, "a clean exit deregisters")
	})

	t.Run("DrainOrderFinishesInFlightJobsThenReturns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		h := newBlockingHandler(4)
		b.reg.Register("block", h)
		reg := &fakeRegistrar{}
		cfg := b.cfg(jobType("block", "block"))
		cfg.Registrar, cfg.HeartbeatInterval = reg, 10*time.Millisecond
		_, done := runWorker(t, cfg)
		b.publish(t, "block", "block", `{}`, "b1")
		<-h.running

		reg.order(wire.InstructionDrain)
		require.Eventually(t, func() bool {
			_, beats, _ := reg.snapshot()
			return len(beats) > 0 && beats[len(beats)-1].Status == wire.WorkerDraining
		}, 10*time.Second, 5*time.Millisecond, "the worker reports itself draining")
		select {
		case err := <-done:
			t.Fatalf("Run returned with a job in flight: %v", err)
		default:
		}
		close(h.gate)
		waitRun(t, done)
		res, ok := b.api.result("b1")
		require.True(t, ok)
		require.Equal(t, wire.ResultDone, res.Status, "the job in flight finished")
		_, _, deregistered := reg.snapshot()
		require.Equal(t, 1, deregistered)
	})

	t.Run("StopOrderCancelsInFlightJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		h := newBlockingHandler(4)
		b.reg.Register("block", h)
		reg := &fakeRegistrar{}
		cfg := b.cfg(jobType("block", "block"))
		cfg.Registrar, cfg.HeartbeatInterval = reg, 10*time.Millisecond
		cfg.ShutdownGrace = time.Hour // a stop does not wait for it
		_, done := runWorker(t, cfg)
		b.publish(t, "block", "block", `{}`, "s1")
		<-h.running
		reg.order(wire.InstructionStop)
		waitRun(t, done)
		res, ok := b.api.result("s1")
		require.True(t, ok)
		require.Equal(t, wire.ResultFailed, res.Status)
		require.Equal(t, errShutdown.Error(), res.Error)
	})

	t.Run("WithoutRegistrarNothingChanges", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reg.Register("noop", NoopHandler{})
		w, err := New(b.cfg(jobType("noop", "noop")))
		require.NoError(t, err)
		ctx, leave := w.startMembership(t.Context())
		require.Equal(t, t.Context(), ctx)
		leave()
	})
}
