package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// Defaults and limits of jobs wait.
const (
	// pollDefault is the time between two poll rounds.
	pollDefault = 500 * time.Millisecond
	// waitTimeoutDefault bounds the whole wait.
	waitTimeoutDefault = 10 * time.Minute
	// progressEvery is how often a progress line is printed when stderr is not a terminal (a
	// terminal gets its line redrawn after every round).
	progressEvery = 5 * time.Second
	// pollConcurrency bounds the GET /jobs/{id} calls of one round in flight at once.
	pollConcurrency = 8
	// maxListedIDs is how many job ids an exit message names before "and N more".
	maxListedIDs = 5
)

// waitOptions are the flags of a wait (jobs wait, jobs submit --wait).
type waitOptions struct {
	poll    time.Duration
	timeout time.Duration
}

// check refuses durations that make no sense.
func (o waitOptions) check(cmd *cobra.Command) error {
	if o.poll <= 0 {
		return usageErrorf(cmd, "--poll must be positive")
	}
	if o.timeout <= 0 {
		return usageErrorf(cmd, "--wait-timeout must be positive")
	}
	return nil
}

// addWaitTimeoutFlag adds --wait-timeout, how long a wait may last: the one name orchctl gives
// that meaning (--timeout of jobs submit is a job's run-time limit). The old spelling of the
// waits, --timeout, stays as a hidden alias that warns.
func addWaitTimeoutFlag(cmd *cobra.Command, d *time.Duration, def time.Duration, usage string) {
	fl := cmd.Flags()
	fl.DurationVar(d, "wait-timeout", def, usage)
	fl.DurationVar(d, "timeout", def, usage)
	_ = fl.SetAnnotation("timeout", deprecatedFor, []string{"wait-timeout"})
	fl.Lookup("timeout").Hidden = true
	cmd.MarkFlagsMutuallyExclusive("timeout", "wait-timeout")
}

// deprecatedFor annotates a hidden flag kept for an old spelling with the flag that replaced
// it: checkFlags warns when it is used.
const deprecatedFor = "orchctl_deprecated_for"

// warnDeprecated says on stderr which flags of the command line are old spellings, and their
// new names. (cobra's own deprecation notice is lost: it writes to a buffer it never prints.)
func warnDeprecated(cmd *cobra.Command) {
	for _, name := range deprecatedFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		if to := f.Annotations[deprecatedFor]; len(to) > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "orchctl: --%s is deprecated for %s: use --%s (--timeout is a job's run-time limit in jobs submit)\n",
				f.Name, cmd.CommandPath(), to[0])
		}
	}
}

// deprecatedFlags are the names that may be old spellings (annotated deprecatedFor).
var deprecatedFlags = []string{"timeout"}

func newJobsWaitCmd(g *globals) *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:   "wait JOB_ID [JOB_ID...] [--poll 500ms] [--wait-timeout 10m]",
		Short: "Wait until jobs are finished; the exit code says how they ended",
		Long: `Poll jobs until every one is finished (done, dead_letter or cancelled), then print their final
state and exit with a code that scripts can trust:

  0  every job is done
  1  usage error (flags, arguments)
  2  API or auth error: 401/403 (check --token / $ORCH_API_TOKEN), 404 unknown job, or the API
     could not be reached on the first poll
  3  at least one job ended in dead_letter
  4  at least one job ended cancelled (and none in dead_letter)
  5  --wait-timeout passed before every job finished (and none ended dead_letter or cancelled)

A known failure outranks a timeout: when the wait times out after one job was dead-lettered, the
code is 3. Once the first poll has succeeded, passing trouble (429, 5xx, a connection refused
while the orchestrator restarts) is reported on standard error and the polling goes on until
--wait-timeout.

Progress ("3/10 finished: 3 done, 1 running, 6 pending") goes to standard error: redrawn in place
on a terminal, otherwise one line every ` + progressEvery.String() + `. With -o json the one document printed is
{"jobs": [...]}, the jobs in the order given.`,
		Example: `  orchctl jobs wait job-1 job-2 job-3
  orchctl jobs wait "$JOB" --wait-timeout 1h --poll 2s || echo "job failed with $?"`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(cmd); err != nil {
				return err
			}
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			return g.wait(cmd, c, args, o, true)
		},
	}
	cmd.Flags().DurationVar(&o.poll, "poll", pollDefault, "time between polls")
	addWaitTimeoutFlag(cmd, &o.timeout, waitTimeoutDefault, "give up after this long (exit code 5)")
	return cmd
}

// wait polls ids until they are finished or the wait times out, prints them (the table only
// when printTable) and returns the exit verdict.
func (g *globals) wait(cmd *cobra.Command, c *client.Client, ids []string, o waitOptions, printTable bool) error {
	ids = dedupe(ids)
	jobs, timedOut, err := g.pollUntilFinished(cmd.Context(), c, ids, o, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	switch {
	case g.json():
		if err := writeJSON(out, client.JobList{Jobs: jobs}); err != nil {
			return err
		}
	case printTable:
		now := g.now()
		t := newTable(out, "JOB ID", "TYPE", "STATUS", "ATTEMPTS", "FINISHED", "LAST ERROR")
		for _, j := range jobs {
			finished := "-"
			if j.FinishedAt != nil {
				finished = fmtAge(max(now.Sub(*j.FinishedAt), 0)) + " ago"
			}
			t.row(j.JobID, orDash(j.Type), orDash(j.Status), attempts(j), finished,
				orDash(truncate(j.LastError, maxCellError)))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return waitVerdict(jobs, timedOut, o.timeout)
}

// pollUntilFinished polls every unfinished job each round until all are terminal (timedOut
// false) or o.timeout passes (timedOut true). Errors of the first round, and errors that will
// not go away (401, 403, 404), end the wait; later passing errors are reported and retried.
func (g *globals) pollUntilFinished(ctx context.Context, c *client.Client, ids []string, o waitOptions, stderr io.Writer) (jobs []client.Job, timedOut bool, err error) {
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	jobs = make([]client.Job, len(ids))
	for i, id := range ids {
		jobs[i].JobID = id
	}
	p := &progress{w: stderr, tty: g.stderrTTY, now: g.now, start: g.now()}
	defer p.end()
	for round := 0; ; round++ {
		err := g.pollRound(waitCtx, c, jobs)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, false, err // interrupted
		case waitCtx.Err() != nil:
			return jobs, true, nil
		case round == 0 || !retryable(err):
			return nil, false, err
		default:
			p.warn(err)
		}
		finished := allFinished(jobs)
		p.update(jobs, finished)
		if finished {
			return jobs, false, nil
		}
		t := time.NewTimer(o.poll)
		select {
		case <-waitCtx.Done():
			t.Stop()
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			return jobs, true, nil
		case <-t.C:
		}
	}
}

// pollRound fetches every unfinished job, a few at a time, and updates jobs in place. It returns
// the first error; the jobs fetched without error are updated all the same.
func (g *globals) pollRound(ctx context.Context, c *client.Client, jobs []client.Job) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		sem      = make(chan struct{}, pollConcurrency)
	)
	for i := range jobs {
		if terminal(jobs[i].Status) {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			callCtx, cancel := context.WithTimeout(ctx, g.requestTimeout)
			defer cancel()
			j, err := c.GetJob(callCtx, jobs[i].JobID)
			if err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
				return
			}
			jobs[i] = j // each goroutine owns its index
		})
	}
	wg.Wait()
	return firstErr
}

// cmpErr keeps the first error, but lets an error that ends the wait replace a passing one.
func cmpErr(have, next error) error {
	if have == nil || (retryable(have) && !retryable(next)) {
		return next
	}
	return have
}

// retryable reports whether a poll error may go away by itself: a 408, 429 or 5xx answer, or no
// answer at all (connection refused or reset, a call timing out).
func retryable(err error) bool {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Temporary()
	}
	var urlErr *url.Error
	return errors.As(err, &urlErr)
}

func allFinished(jobs []client.Job) bool {
	for _, j := range jobs {
		if !terminal(j.Status) {
			return false
		}
	}
	return true
}

// waitVerdict turns the final states into the exit code of the wait (nil: every job is done).
func waitVerdict(jobs []client.Job, timedOut bool, timeout time.Duration) error {
	var dead, cancelled, open []string
	for _, j := range jobs {
		switch {
		case j.Status == statusDeadLetter:
			dead = append(dead, j.JobID)
		case j.Status == statusCancelled:
			cancelled = append(cancelled, j.JobID)
		case !terminal(j.Status):
			open = append(open, j.JobID)
		}
	}
	n := len(jobs)
	unfinished := ""
	if timedOut && len(open) > 0 {
		unfinished = fmt.Sprintf("timed out after %s: %d of %d jobs not finished: %s", timeout, len(open), n, listIDs(open))
	}
	// also appends the timeout to the message of a failure that outranks it.
	also := func(msg string) string {
		if unfinished != "" {
			return msg + "; " + unfinished
		}
		return msg
	}
	switch {
	case len(dead) > 0:
		return &exitError{code: exitDeadLetter, msg: also(fmt.Sprintf("%d of %d jobs ended in dead_letter: %s", len(dead), n, listIDs(dead)))}
	case len(cancelled) > 0:
		return &exitError{code: exitCancelled, msg: also(fmt.Sprintf("%d of %d jobs were cancelled: %s", len(cancelled), n, listIDs(cancelled)))}
	case unfinished != "":
		return &exitError{code: exitTimeout, msg: unfinished}
	}
	return nil
}

// listIDs names the first few ids: "a, b, c and 4 more".
func listIDs(ids []string) string {
	if len(ids) <= maxListedIDs {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:maxListedIDs], ", ") + " and " + strconv.Itoa(len(ids)-maxListedIDs) + " more"
}

// dedupe drops repeated ids, keeping the first occurrence of each.
func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
