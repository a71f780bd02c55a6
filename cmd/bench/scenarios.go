package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"time"
)

// scenarioNames are the scenarios in their default order. burndown comes first: with the
// bench's own stack no worker runs yet, so nothing has to be stopped. leases and admission
// (about -duration each) stop the workers, so they come after the scenarios that need them.
var scenarioNames = []string{"burndown", "streaming", "latency", "leases", "admission"}

// extraScenarios run only when -scenarios names them: release (GPU jobs queued on the simulated
// node: the time from a release to the next start), schedule (a backlog of GPU jobs placed on
// two simulated nodes by the scheduler) and backlog, which takes minutes (a million jobs by
// default) and leaves its jobs unrun, so it always runs last.
var extraScenarios = []string{"release", "schedule", "backlog"}

// The bench counts finished jobs in the database every pollInterval once the end is near, and
// less often before: a count reads the index entries of every finished job of the type
// (tens of ms at 50,000), and polling at a fixed 100 ms spent up to a fifth of a core of the
// MariaDB under test on the bench's own count. The figures come from the job rows, not from
// when the poll saw the end.
const (
	pollInterval    = 100 * time.Millisecond
	pollIntervalMax = 2 * time.Second
)

// measureTimeout bounds the final database reads of a scenario, which run even after the
// scenario's own deadline has passed.
const measureTimeout = 30 * time.Second

// runner runs the scenarios against one stack.
type runner struct {
	o     *options
	st    *stack
	hc    *http.Client // the API client's, also for GET /metrics
	sub   submitter
	jdb   jobsDB
	runID string
}

// run runs one scenario under the -timeout deadline and returns its result, partial when the
// deadline or ctx ended it.
func (r *runner) run(ctx context.Context, name string) *ScenarioResult {
	ids := idSpace{prefix: fmt.Sprintf("b%s-%s-", r.runID, name)}
	notes := r.drain(ctx)
	timeout, timeoutFlag := r.o.timeout, "-timeout"
	if name == "backlog" {
		timeout, timeoutFlag = r.o.backlogTimeout, "-backlog-timeout"
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var prof *profiler
	if r.o.pprof == name {
		prof = r.startProfile(name)
	}
	cpu := cpuSampler{st: r.st}
	cpuBefore, t0 := cpu.snapshot(), time.Now()
	var res *ScenarioResult
	switch name {
	case "burndown":
		res = r.burndown(sctx, ids)
	case "streaming":
		res = r.streaming(sctx, ids)
	case "latency":
		res = r.latency(sctx, ids)
	case "leases":
		res = r.leases(sctx)
	case "release":
		res = r.release(sctx, ids)
	case "schedule":
		res = r.schedule(sctx, ids)
	case "admission":
		res = r.admission(sctx, ids)
	case "backlog":
		res = r.backlog(sctx, ids)
	default:
		res = &ScenarioResult{Error: "unknown scenario"}
	}
	res.CPU = cpuDelta(cpuBefore, cpu.snapshot(), time.Since(t0), runtime.NumCPU())
	res.Notes = append(notes, res.Notes...)
	if errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		res.TimedOut = true
		res.Error = fmt.Sprintf("did not complete within %s %s; the figures are partial (%s)", timeoutFlag, timeout,
			cmp.Or(res.Error, "deadline"))
	}
	mctx, mcancel := context.WithTimeout(context.WithoutCancel(ctx), measureTimeout)
	defer mcancel()
	if counts, err := r.jdb.statusCounts(mctx, ids.prefix); err == nil {
		res.Statuses = counts
	}
	if prof != nil {
		if path, err := prof.finish(mctx); err != nil {
			res.Notes = append(res.Notes, err.Error())
		} else {
			res.Notes = append(res.Notes, "orchestrator CPU profile (perf): "+path)
		}
	}
	return res
}

// drainWait bounds how long a scenario waits for the unfinished jobs of earlier ones.
const drainWait = time.Minute

// drain waits (up to drainWait) until no job of the database is unfinished, so that a scenario
// that timed out does not spill its backlog into the next one's figures. It returns a note
// when jobs were left. The backlog scenario, whose jobs are never run, always runs last
// (lastScenario): no scenario comes after it to wait for them.
func (r *runner) drain(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, min(drainWait, r.o.timeout))
	defer cancel()
	n, err := r.jdb.unfinished(ctx)
	if err != nil || n == 0 {
		return nil
	}
	if r.st.canManageWorkers() {
		if err := r.st.startWorkers(ctx); err != nil {
			return []string{"drain earlier jobs: " + err.Error()}
		}
	}
	progress("waiting up to %s for %d unfinished jobs of earlier scenarios", drainWait, n)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for n > 0 {
		if err := r.st.check(); err != nil {
			return []string{"drain earlier jobs: " + err.Error()}
		}
		select {
		case <-ctx.Done():
			return []string{fmt.Sprintf("%d jobs of earlier scenarios were unfinished at the start and competed with this one", n)}
		case <-t.C:
		}
		if n, err = r.jdb.unfinished(ctx); err != nil {
			n = 1 // keep waiting until the deadline
		}
	}
	return nil
}

// burndown submits -n jobs with the workers stopped, then starts them and measures how fast
// they work the backlog off.
func (r *runner) burndown(ctx context.Context, ids idSpace) *ScenarioResult {
	res := &ScenarioResult{Window: "first job started → last job done (database started_at/finished_at)"}
	if r.st.canManageWorkers() {
		if err := r.st.stopWorkers(); err != nil {
			res.Notes = append(res.Notes, "stopping workers: "+err.Error())
		}
	} else {
		res.Notes = append(res.Notes, "-no-workers: the stack's workers ran during the submit phase; this is not a burndown")
	}
	progress("burndown: submitting %d jobs with %d producers (workers stopped)", r.o.n, r.o.producers)
	ls := r.closedLoop(ctx, "burndown", ids, r.o.n, r.o.producers)
	r.fillSubmit(res, ls)
	if ctx.Err() != nil {
		return r.measure(ctx, res, ids, true, time.Time{}, time.Time{})
	}
	if r.st.canManageWorkers() {
		progress("burndown: starting %d workers", r.o.workers)
	}
	before := r.scrapeDurations(ctx, res) // after the submits: the workers' calls only
	wallStart := time.Now()
	if err := r.st.startWorkers(ctx); err != nil {
		res.Error = err.Error()
		return r.measure(ctx, res, ids, true, time.Time{}, time.Time{})
	}
	wallEnd, err := r.waitDone(ctx, "burndown", ids, int(ls.accepted.Load()))
	if err != nil {
		res.Error = err.Error()
	}
	r.measure(ctx, res, ids, true, wallStart, wallEnd)
	r.jobRouteTimes(ctx, res, before)
	return res
}

// streaming submits -n jobs as fast as -producers can with the workers running, and measures
// jobs per second from the first submit to the last done.
func (r *runner) streaming(ctx context.Context, ids idSpace) *ScenarioResult {
	res := &ScenarioResult{Window: "first submit → last job done (database created_at/finished_at)"}
	if err := r.st.startWorkers(ctx); err != nil {
		res.Error = err.Error()
		return res
	}
	progress("streaming: submitting %d jobs with %d producers (workers running)", r.o.n, r.o.producers)
	before := r.scrapeDurations(ctx, res)
	ls := r.closedLoop(ctx, "streaming", ids, r.o.n, r.o.producers)
	r.fillSubmit(res, ls)
	wallEnd, err := r.waitDone(ctx, "streaming", ids, int(ls.accepted.Load()))
	if err != nil {
		res.Error = err.Error()
	}
	r.measure(ctx, res, ids, false, ls.start, wallEnd)
	r.latencies(ctx, res, ids)
	r.jobRouteTimes(ctx, res, before)
	return res
}

// latency offers -rate submits per second for -duration (open loop) with the workers running
// and measures, per job, submit → handler start from the database.
func (r *runner) latency(ctx context.Context, ids idSpace) *ScenarioResult {
	res := &ScenarioResult{Window: "first submit → last job done (database created_at/finished_at)", TargetRate: r.o.rate}
	if err := r.st.startWorkers(ctx); err != nil {
		res.Error = err.Error()
		return res
	}
	total := pacerTotal(r.o.rate, r.o.duration)
	progress("latency: offering %.0f submits/s for %s (%d jobs, open loop, workers running)", r.o.rate, r.o.duration, total)
	before := r.scrapeDurations(ctx, res)
	ls := newLoadStats(total, true)
	stop := ticker(time.Second, func() { progress("latency: submitted %d/%d", ls.sent(), total) })
	r.sub.openLoop(ctx, ls, ids, r.o.rate, r.o.maxInflight)
	stop()
	r.fillSubmit(res, ls)
	lag := summarize(nonZero(ls.lag))
	res.SendLagMS = &lag
	wallEnd, err := r.waitDone(ctx, "latency", ids, int(ls.accepted.Load()))
	if err != nil {
		res.Error = err.Error()
	}
	r.measure(ctx, res, ids, false, ls.start, wallEnd)
	r.latencies(ctx, res, ids)
	r.jobRouteTimes(ctx, res, before)
	return res
}

// jobRoutes are the routes of a job's way from its submit to its result, by their name in
// server_ms.
var jobRoutes = map[string]string{"submit": "/jobs/submit", "claim": "/internal/jobs/claim", "complete": "/internal/jobs/complete"}

// scrapeDurations reads the orchestrator's request durations at a scenario's start; nil, with
// a note in res, when that fails (the scenario then has no server_ms).
func (r *runner) scrapeDurations(ctx context.Context, res *ScenarioResult) []sample {
	s, err := scrapeSamples(ctx, r.hc, r.st.info.APIURL, metricHTTPDuration)
	if err != nil {
		res.Notes = append(res.Notes, "no server-side figures: "+err.Error())
		return nil
	}
	return s
}

// jobRouteTimes fills res.ServerMS with the orchestrator's own time of the job routes since
// before (scrapeDurations'), which splits a job's latency into its submit and its claim.
func (r *runner) jobRouteTimes(ctx context.Context, res *ScenarioResult, before []sample) {
	if before == nil {
		return
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), measureTimeout)
	defer cancel()
	after, err := scrapeSamples(mctx, r.hc, r.st.info.APIURL, metricHTTPDuration)
	if err != nil {
		res.Notes = append(res.Notes, "no server-side figures: "+err.Error())
		return
	}
	res.ServerMS = routeLatencies(before, after, jobRoutes)
}

// closedLoop runs a closed-loop submit phase with a progress line every second.
func (r *runner) closedLoop(ctx context.Context, name string, ids idSpace, n, producers int) *loadStats {
	ls := newLoadStats(n, false)
	stop := ticker(time.Second, func() { progress("%s: submitted %d/%d", name, ls.sent(), n) })
	defer stop()
	r.sub.closedLoop(ctx, ls, ids, n, producers)
	return ls
}

// fillSubmit copies the submit phase's figures into res and logs its first error.
func (r *runner) fillSubmit(res *ScenarioResult, ls *loadStats) {
	res.Submitted = int(ls.accepted.Load())
	res.SubmitErrors = ls.errorCounts()
	d := ls.end.Sub(ls.start)
	res.SubmitSeconds = seconds(d)
	res.SubmitPerSec = perSec(res.Submitted, d)
	p := summarize(nonZero(ls.lat))
	res.SubmitHTTPMS = &p
	if ls.firstErr != nil {
		progress("submit errors: %d, the first: %v", ls.failed.Load(), ls.firstErr)
	}
}

// waitDone polls the database until want of the scenario's jobs are in a terminal status,
// printing progress every second. It returns when the last one was seen. The wait between
// polls is a quarter of the time the jobs left should take at the rate seen so far, between
// pollInterval and pollIntervalMax.
func (r *runner) waitDone(ctx context.Context, name string, ids idSpace, want int) (time.Time, error) {
	if want == 0 {
		return time.Now(), nil
	}
	t := time.NewTimer(pollInterval)
	defer t.Stop()
	var (
		start, last, lastPrint time.Time
		first, prevDone        = -1, -1
	)
	for {
		if err := r.st.check(); err != nil {
			return time.Time{}, fmt.Errorf("wait for %d jobs to finish: %w", want, err)
		}
		counts, err := r.jdb.terminalCounts(ctx, ids.prefix)
		if err != nil && ctx.Err() == nil {
			return time.Time{}, err
		}
		now, n := time.Now(), sum(counts)
		if n >= want {
			if bad := n - counts["done"]; bad > 0 {
				progress("%s: %d jobs ended without done: %v", name, bad, counts)
			}
			return now, nil
		}
		switch done := counts["done"]; {
		case prevDone < 0:
			start, last, lastPrint, first, prevDone = now, now, now, n, done
		case now.Sub(lastPrint) >= time.Second:
			progress("%s: done %d/%d (%.0f/s)", name, done, want, float64(done-prevDone)/now.Sub(last).Seconds())
			last, lastPrint, prevDone = now, now, done
		}
		t.Reset(nextPoll(want-n, n-first, now.Sub(start)))
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for %d jobs to finish: %w", want, ctx.Err())
		case <-t.C:
		}
	}
}

// nextPoll is the wait before the next count: a quarter of the time the left jobs should take
// at the rate of the finished ones (finished in elapsed), within pollInterval..pollIntervalMax.
func nextPoll(left, finished int, elapsed time.Duration) time.Duration {
	if finished <= 0 || elapsed <= 0 {
		return pollInterval
	}
	eta := time.Duration(float64(elapsed) * float64(left) / float64(finished))
	return min(max(eta/4, pollInterval), pollIntervalMax)
}

// measure fills the throughput figures of res from the database window of the done jobs: from
// the first job's start when fromStart (burndown: the backlog was there before the workers),
// else from the first submit. The wall figures come from wallStart and wallEnd when both are set.
func (r *runner) measure(ctx context.Context, res *ScenarioResult, ids idSpace, fromStart bool, wallStart, wallEnd time.Time) *ScenarioResult {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), measureTimeout)
	defer cancel()
	w, err := r.jdb.window(mctx, ids.prefix)
	if err != nil {
		res.Error = cmp.Or(res.Error, err.Error())
		return res
	}
	res.Jobs = w.Jobs
	from := w.FirstCreated
	if fromStart {
		from = w.FirstStarted
	}
	if w.Jobs > 0 {
		d := w.LastFinished.Sub(from)
		res.Seconds, res.JobsPerSec = seconds(d), perSec(w.Jobs, d)
	}
	if !wallStart.IsZero() && !wallEnd.IsZero() {
		d := wallEnd.Sub(wallStart)
		res.WallSeconds, res.WallJobsPerSec = seconds(d), perSec(w.Jobs, d)
	}
	return res
}

// latencies fills the per-job latency percentiles of res from the database.
func (r *runner) latencies(ctx context.Context, res *ScenarioResult, ids idSpace) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), measureTimeout)
	defer cancel()
	start, done, err := r.jdb.latencies(mctx, ids.prefix)
	if err != nil {
		res.Error = cmp.Or(res.Error, err.Error())
		return
	}
	ls, ld := summarize(start), summarize(done)
	res.LatencyMS, res.EndToEndMS = &ls, &ld
}

// startProfile starts perf on the orchestrator for scenario name; a failure is a note in the
// log, not an error of the scenario.
func (r *runner) startProfile(name string) *profiler {
	if r.st.orch == nil {
		progress("-pprof: only the bench's own orchestrator can be profiled; skipped")
		return nil
	}
	prof, err := startProfile(r.st.dir, filepath.Dir(r.o.out), "orchestrator-"+name, r.st.orch.pid())
	if err != nil {
		progress("-pprof: %v", err)
		return nil
	}
	progress("-pprof: recording the orchestrator's CPU with perf during %s", name)
	return prof
}
