package worker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/gpuorch/orchestrator/config"
)

// Model warm-up. A worker of a pool whose configuration names a preload command
// (worker.preload) runs it once, for its pool's model, before it registers: the scheduler
// sees the worker only once it is warm, and prefers its node for jobs of that model
// (docs/architecture.md, "Worker pools and the worker registry"). The model is the worker's
// ORCH_MODEL_ID, which the local provisioner sets; without one, the model of its pool's latest
// preload event (the event a pool's creation or update writes). A preload that fails ends the
// worker with its error: a worker that cannot load its model must not take the model's jobs.

// preloadScan is how many of the newest preload events a worker looks through for its pool's.
const preloadScan = 1000

// Preloader runs the preload of model; Config.Preload.
type Preloader func(ctx context.Context, model string) error

// PreloadCommand is the Preloader that runs c (argv, never a shell) with the worker's
// environment, c.Env, ORCH_POOL_ID and ORCH_MODEL_ID; its output goes to the worker's log
// stream (stderr). ctx's end kills its process group.
func PreloadCommand(c *config.Command, pool string) Preloader {
	return func(ctx context.Context, model string) error {
		cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...) //nolint:gosec // argv comes from the operator's config only
		cmd.Dir = c.Dir
		cmd.Env = append(append(os.Environ(), c.Env...), "ORCH_POOL_ID="+pool, "ORCH_MODEL_ID="+model)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("preload %s: %w", c.Argv[0], err)
		}
		return nil
	}
}

// preload runs the worker's preload, when it has one and a model to load, and records the
// model it warmed. Called by Run before the worker registers.
func (w *Worker) preload(ctx context.Context) error {
	if w.cfg.Preload == nil {
		return nil
	}
	model := w.cfg.ModelID
	if model == "" && w.cfg.PoolID != "" {
		p, ok, err := w.cfg.Streams.LatestPreload(ctx, w.cfg.PoolID, preloadScan)
		if err != nil {
			return fmt.Errorf("preload: find the model of pool %s: %w", w.cfg.PoolID, err)
		}
		if ok {
			model = p.ModelID
		}
	}
	if model == "" {
		w.log.Warn("preload skipped: no model to load (no ORCH_MODEL_ID, and no preload event of the pool)",
			"pool_id", w.cfg.PoolID)
		return nil
	}
	start := time.Now()
	w.log.Info("preloading the pool's model", "model_id", model, "pool_id", w.cfg.PoolID)
	if err := w.cfg.Preload(ctx, model); err != nil {
		return fmt.Errorf("preload model %s: %w", model, err)
	}
	w.warmModel = model
	w.log.Info("model preloaded: the worker is warm", "model_id", model, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
