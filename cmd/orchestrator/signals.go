package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// exitInterrupted is the exit code of a stop forced by a second signal (the shell's 128+SIGINT).
const exitInterrupted = 130

// shutdownOnSignal returns a context that ends at the first SIGINT or SIGTERM, which starts the
// graceful shutdown: it logs how long the drain may take (grace, shutdown_grace) and that a
// second signal stops at once. The second signal calls exit(exitInterrupted) without draining:
// what was in flight is recovered at the next start, as after a crash. stop releases the
// signals.
func shutdownOnSignal(parent context.Context, log *slog.Logger, grace time.Duration, exit func(int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			log.Warn("signal received: shutting down gracefully; in-flight requests and jobs get up to "+
				"the grace (shutdown_grace) to finish. Send it again (Ctrl-C) to stop at once.",
				"signal", s.String(), "grace", grace.String())
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			log.Warn("second signal: stopping at once without draining; unfinished jobs are "+
				"recovered at the next start", "signal", s.String())
			exit(exitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
