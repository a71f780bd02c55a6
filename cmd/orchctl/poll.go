package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// Defaults of the waits on pools (pools drain|evict --wait, control drain --wait).
const (
	// poolPollDefault is the time between two looks at the pools.
	poolPollDefault = time.Second
	// poolWaitTimeoutDefault bounds such a wait: above the default drain grace (60s), after
	// which the workers left are stopped, with room for the last jobs to be reported.
	poolWaitTimeoutDefault = 5 * time.Minute
)

// addWaitFlags adds --wait, --poll and --wait-timeout to a command that can wait for the state it
// asked for.
func addWaitFlags(cmd *cobra.Command, wait *bool, o *waitOptions, what string) {
	fl := cmd.Flags()
	fl.BoolVar(wait, "wait", false, "wait until "+what+" (exit code 5 when --wait-timeout passes first)")
	fl.DurationVar(&o.poll, "poll", poolPollDefault, "with --wait: time between looks")
	addWaitTimeoutFlag(cmd, &o.timeout, poolWaitTimeoutDefault, "with --wait: give up after this long (exit code 5)")
}

// checkFunc looks at the state once: done when the wait is over, line a one-line summary for
// the progress report.
type checkFunc func(ctx context.Context) (done bool, line string, err error)

// pollState calls check every o.poll until it says done (nil) or o.timeout passes (exit code
// 5, with the last summary). Like jobs wait, an error of the first look, or one that will not
// go away by itself (401, 403, 404), ends the wait; later passing errors (a restarting
// orchestrator, 5xx) are reported on stderr and the polling goes on.
func (g *globals) pollState(ctx context.Context, stderr io.Writer, o waitOptions, what string, check checkFunc) error {
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	r := &stateReporter{w: stderr, tty: g.stderrTTY, now: g.now, start: g.now()}
	defer r.end()
	last := "nothing seen yet"
	for round := 0; ; round++ {
		callCtx, cancelCall := context.WithTimeout(waitCtx, g.requestTimeout)
		done, line, err := check(callCtx)
		cancelCall()
		switch {
		case err == nil:
			last = line
			r.update(line, done)
			if done {
				return nil
			}
		case ctx.Err() != nil:
			return ctx.Err() // interrupted
		case waitCtx.Err() != nil:
		case round == 0 || !retryable(err):
			return err
		default:
			r.warn(err)
		}
		t := time.NewTimer(o.poll)
		select {
		case <-waitCtx.Done():
			t.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &exitError{code: exitTimeout, msg: fmt.Sprintf("timed out after %s waiting until %s; last seen: %s",
				o.timeout, what, last)}
		case <-t.C:
		}
	}
}

// stateReporter shows a wait's progress on stderr like the jobs wait's progress: one line
// redrawn on a terminal, otherwise a line every progressEvery when the state changed or the
// interval passed.
type stateReporter struct {
	w     io.Writer
	tty   bool
	now   func() time.Time
	start time.Time
	last  time.Time
	shown string
	drawn bool
}

// update shows the state after a look; final says the wait is over.
func (r *stateReporter) update(line string, final bool) {
	now := r.now()
	text := line + " (" + fmtAge(max(now.Sub(r.start), 0)) + ")"
	if r.tty {
		fmt.Fprintf(r.w, "\r\x1b[K%s", text)
		r.drawn = true
		return
	}
	if final && r.last.IsZero() {
		return // done at the first look: the result says it all
	}
	if line == r.shown && now.Sub(r.last) < progressEvery {
		return
	}
	r.last, r.shown = now, line
	fmt.Fprintln(r.w, "waiting: "+text)
}

// warn reports a passing error on its own line.
func (r *stateReporter) warn(err error) {
	r.end()
	fmt.Fprintf(r.w, "orchctl: %s (retrying)\n", err)
}

// end finishes a progress line left on the terminal.
func (r *stateReporter) end() {
	if r.drawn {
		fmt.Fprintln(r.w)
		r.drawn = false
	}
}
