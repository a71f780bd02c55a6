package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/gpuorch/orchestrator/client"
)

// The backlog scenario checks the performance goal "memory of the orchestrator flat (within
// 20%) as the backlog grows from 10,000 to 1,000,000 pending jobs, and submit throughput at a
// 1,000,000 backlog within 20% of an empty queue". With the workers stopped it probes the
// single-submit path at an empty queue, fills the backlog to backlogBase with the batch
// endpoint, probes again, fills to -backlog and probes a third time. Its jobs are never run.
const (
	// backlogBase is the backlog of the second probe, the reference of the memory ratio.
	backlogBase = 10000
	// backlogGoalTolerance is the goal's 20%: RSS at -backlog at most 1.2 × RSS at backlogBase,
	// the submit rate at -backlog at least 0.8 × the empty queue's.
	backlogGoalTolerance = 0.2
	// probeRateCap bounds the submits of one probe per second of -backlog-probe (the size of
	// its latency record); a probe that reaches it ends early, with its rate still right.
	probeRateCap = 20000
	// probeSettle is how long the orchestrator's memory is still sampled after a probe's last
	// answer, once the load has stopped.
	probeSettle = time.Second
	// memorySettleMax bounds the wait before a probe for the orchestrator's RSS to settle.
	memorySettleMax = 30 * time.Second
	// probeWarmup is how many single submits warm the stack up (connections, pools) before the
	// first probe, so that the empty queue's rate is not that of a cold start.
	probeWarmup = 500
	// fillSettleMax bounds the wait, after a fill, for the orchestrator to mark every job
	// enqueued: the probe measures the backlog, not the tail of the fill.
	fillSettleMax = time.Minute
)

// BacklogProbe is one probe of the backlog scenario: closed-loop single submits
// (POST /jobs/submit, -producers submitters) for -backlog-probe at one backlog, and what the
// orchestrator and Redis held then.
type BacklogProbe struct {
	// Name is "empty", "base" (backlogBase pending jobs) or "full" (-backlog).
	Name string `json:"name"`
	// Target is the backlog the fill aimed at; Backlog the pending jobs of the type in the
	// database at the probe's start (the probe then adds Submitted more).
	Target  int `json:"target"`
	Backlog int `json:"backlog"`
	// FillPerSec is the rate of the batch fill that brought the backlog here (jobs/s), and
	// SettleSeconds the wait after it until no pending job was left unmarked (not enqueued).
	FillPerSec    float64 `json:"fill_per_sec,omitempty"`
	SettleSeconds float64 `json:"settle_seconds,omitempty"`
	// MemorySettleSeconds is the wait before the probe for the orchestrator's RSS to stop
	// falling (rssSettled): a batch fill leaves heap the Go runtime returns to the system
	// over seconds, which is the fill's, not the backlog's. RSSBeforeMiB is the RSS then.
	MemorySettleSeconds float64 `json:"memory_settle_seconds,omitempty"`
	RSSBeforeMiB        float64 `json:"rss_before_mib,omitempty"`
	// Submitted counts the probe's accepted submits; SubmitErrors the others by code.
	Submitted    int            `json:"submitted"`
	SubmitErrors map[string]int `json:"submit_errors,omitempty"`
	// SubmitSeconds is the probe (first request to last answer); SubmitPerSec its rate.
	SubmitSeconds float64 `json:"submit_seconds"`
	SubmitPerSec  float64 `json:"submit_per_sec"`
	// SubmitHTTPMS is the client-side latency of POST /jobs/submit during the probe.
	SubmitHTTPMS *Percentiles `json:"submit_http_ms,omitempty"`
	// OrchestratorRSSMiB is the orchestrator's highest resident set size during the probe and
	// the probeSettle after it: VmRSS sampled every 250 ms (own stack), else the
	// process_resident_memory_bytes of two scrapes of GET /metrics (at the end of the probe and
	// after probeSettle).
	OrchestratorRSSMiB float64 `json:"orchestrator_rss_mib,omitempty"`
	// OrchestratorAnonMiB is the highest RssAnon over the same samples (own stack only): the
	// RSS less the pages of the binary, which are the same in every probe of a run but not
	// from one run to the next.
	OrchestratorAnonMiB float64 `json:"orchestrator_rss_anon_mib,omitempty"`
	// OrchestratorHeapMiB is the higher go_memstats_heap_inuse_bytes of those two scrapes: the
	// Go heap, without the memory the runtime has not returned to the system yet.
	OrchestratorHeapMiB float64 `json:"orchestrator_heap_inuse_mib,omitempty"`
	// RedisUsedMemoryMiB is Redis's used_memory at the probe's start (the whole server: other
	// tenants included); StreamEntries and StreamMiB are the job type's stream (XLEN, MEMORY
	// USAGE) then.
	RedisUsedMemoryMiB float64 `json:"redis_used_memory_mib,omitempty"`
	StreamEntries      int64   `json:"stream_entries"`
	StreamMiB          float64 `json:"stream_mib"`
	// CPU is the CPU time each part of the stack used during the probe.
	CPU map[string]CPUUse `json:"cpu,omitempty"`
}

// backlogRun is one run of the backlog scenario.
type backlogRun struct {
	r   *runner
	res *ScenarioResult
	rr  *redisReader
	// fills are the batch fills so far, for the scenario's fill figures.
	fills []*loadStats
	// entries0 and pending0 are the stream's entries and the pending jobs before the scenario
	// (earlier scenarios' entries stay in the stream until trimmed).
	entries0 int64
	pending0 int
}

// backlog runs the scenario: probe at an empty queue, fill to backlogBase, probe, fill to
// -backlog, probe; workers stopped throughout.
func (r *runner) backlog(ctx context.Context, ids idSpace) *ScenarioResult {
	res := &ScenarioResult{Window: "no job runs: the figures are the probes (closed-loop submits for -backlog-probe at each backlog)"}
	switch {
	case r.st.canManageWorkers():
		if err := r.st.stopWorkers(); err != nil {
			res.Notes = append(res.Notes, "stopping workers: "+err.Error())
		}
	default:
		res.Notes = append(res.Notes, "-no-workers: the stack's workers may run the backlog off while it is filled; the backlog figures say how many jobs were pending")
	}
	if r.st.orch == nil {
		res.Notes = append(res.Notes, "-api-url: the orchestrator's RSS is process_resident_memory_bytes of GET /metrics (two scrapes per probe), not sampled from /proc")
	}
	if !r.st.owned() {
		res.Notes = append(res.Notes, "-api-url: the scenario's jobs are left pending in that orchestrator's database and stream (b"+r.runID+"-backlog-*); its workers will run them")
	}
	b := &backlogRun{r: r, res: res, rr: newRedisReader(r.st.redisAddr, r.st.info.RedisPrefix, r.o.jobType)}
	defer b.rr.close()
	steps := []struct {
		name   string
		target int
	}{{"empty", 0}, {"base", backlogBase}, {"full", r.o.backlog}}
	if rs, err := b.rr.read(ctx); err == nil {
		b.entries0 = rs.entries
	}
	b.pending0, _ = r.jdb.pending(ctx)
	b.warmUp(ctx, idSpace{prefix: ids.prefix + "w-"})
	fillIDs, filled := idSpace{prefix: ids.prefix + "f-"}, 0
	for i, step := range steps {
		if ctx.Err() != nil {
			break
		}
		fillRate, settle := 0.0, 0.0
		if want := step.target - res.Submitted; want > 0 {
			ls, err := b.fill(ctx, step.name, fillIDs, filled, want)
			filled += want
			res.Submitted += int(ls.accepted.Load())
			mergeCounts(&res.SubmitErrors, ls.errorCounts())
			fillRate = perSec(int(ls.accepted.Load()), ls.end.Sub(ls.start))
			if err != nil {
				res.Error = "fill: " + err.Error()
				break
			}
			settle = b.settle(ctx)
		}
		if ctx.Err() != nil {
			break
		}
		p := b.probe(ctx, step.name, step.target, idSpace{prefix: fmt.Sprintf("%sp%d-", ids.prefix, i)})
		p.FillPerSec, p.SettleSeconds = fillRate, settle
		res.Probes = append(res.Probes, p)
		res.Submitted += p.Submitted
		mergeCounts(&res.SubmitErrors, p.SubmitErrors)
		if step.target > 0 && p.Backlog > step.target+step.target/10 {
			b.note("the %s probe started at %d pending jobs, above its %d: the earlier probes' submits add to the backlog (shorten -backlog-probe)", step.name, p.Backlog, step.target)
		}
		if added, jobs := p.StreamEntries-b.entries0, int64(p.Backlog-b.pending0); jobs > 0 && added > jobs+jobs/20 {
			b.note("the %s probe started with %d stream entries for %d pending jobs (%d and %d before the scenario): some jobs were published more than once",
				step.name, p.StreamEntries, p.Backlog, b.entries0, b.pending0)
		}
	}
	b.summarizeFills()
	f := backlogRatios(res.Probes)
	res.RSSRatio, res.RSSAnonRatio, res.HeapRatio, res.SubmitRatio, res.GoalMet = f.rss, f.anon, f.heap, f.submit, f.goalMet
	return res
}

// note adds a note to the result, once per text.
func (b *backlogRun) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	for _, n := range b.res.Notes {
		if n == s {
			return
		}
	}
	b.res.Notes = append(b.res.Notes, s)
}

// warmUp sends probeWarmup single submits, so that the first probe finds the connections
// open and the pools filled. Its jobs count as the scenario's.
func (b *backlogRun) warmUp(ctx context.Context, ids idSpace) {
	ls := newLoadStats(probeWarmup, false)
	b.r.sub.closedLoop(ctx, ls, ids, probeWarmup, b.r.o.producers)
	b.res.Submitted += int(ls.accepted.Load())
	mergeCounts(&b.res.SubmitErrors, ls.errorCounts())
	progress("backlog: warm-up: %d submits in %.2fs", ls.accepted.Load(), ls.end.Sub(ls.start).Seconds())
}

// settle waits (up to fillSettleMax) until the orchestrator has marked every pending job
// enqueued after a fill, and returns how long that took in seconds. Until then its dispatcher
// may still be publishing the fill's jobs, which a probe would measure.
func (b *backlogRun) settle(parent context.Context) float64 {
	ctx, cancel := context.WithTimeout(parent, fillSettleMax)
	defer cancel()
	t0 := time.Now()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	n := -1
	for {
		if m, err := b.r.jdb.unpublished(ctx); err == nil {
			if n = m; n == 0 {
				return seconds(time.Since(t0))
			}
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return seconds(time.Since(t0)) // the scenario is over: no probe follows
			}
			b.note("after a fill, %d pending jobs were still not marked enqueued when the probe started (-1: not counted; waited %.1fs)", n, time.Since(t0).Seconds())
			return seconds(time.Since(t0))
		case <-t.C:
		}
	}
}

// fill submits n jobs from index from of ids with the batch endpoint, printing progress.
func (b *backlogRun) fill(ctx context.Context, toward string, ids idSpace, from, n int) (*loadStats, error) {
	ls := newLoadStats(batchCount(n), false)
	b.fills = append(b.fills, ls)
	progress("backlog: filling %d jobs toward the %s probe (POST /jobs/submit_batch, %d senders of %d jobs)",
		n, toward, fillSenders, min(n, client.SubmitBatchMax))
	last, prev := time.Now(), int64(0)
	stop := ticker(time.Second, func() {
		now, done := time.Now(), ls.accepted.Load()
		progress("backlog: filled %d/%d (%.0f jobs/s)", done, n, float64(done-prev)/now.Sub(last).Seconds())
		last, prev = now, done
	})
	err := b.r.sub.fill(ctx, ls, ids, from, n, fillSenders)
	stop()
	d := ls.end.Sub(ls.start)
	progress("backlog: filled %d jobs in %.1fs = %.0f jobs/s", ls.accepted.Load(), d.Seconds(), perSec(int(ls.accepted.Load()), d))
	if ls.firstErr != nil {
		progress("backlog: fill errors %v, the first: %v", ls.errorCounts(), ls.firstErr)
	}
	return ls, err
}

// summarizeFills sets the scenario's fill figures: every fill together.
func (b *backlogRun) summarizeFills() {
	var (
		jobs int
		d    time.Duration
		lat  []time.Duration
	)
	for _, ls := range b.fills {
		jobs += int(ls.accepted.Load())
		d += ls.end.Sub(ls.start)
		lat = append(lat, nonZero(ls.lat)...)
	}
	if len(b.fills) == 0 {
		return
	}
	p := summarize(lat)
	b.res.FillJobs, b.res.FillSeconds, b.res.FillPerSec, b.res.FillHTTPMS = jobs, seconds(d), perSec(jobs, d), &p
}

// probe submits single jobs for -backlog-probe with -producers closed-loop submitters and
// measures the rate, the latency and the orchestrator's memory.
func (b *backlogRun) probe(ctx context.Context, name string, target int, ids idSpace) BacklogProbe {
	r := b.r
	p := BacklogProbe{Name: name, Target: target}
	if n, err := r.jdb.pending(ctx); err == nil {
		p.Backlog = n
	} else {
		b.note("count pending jobs: %v", err)
	}
	if rs, err := b.rr.read(ctx); err == nil {
		p.RedisUsedMemoryMiB, p.StreamEntries, p.StreamMiB = mib(rs.usedMemory), rs.entries, mib(rs.streamBytes)
	} else {
		b.note("read Redis: %v", err)
	}
	progress("backlog: probe %s: %d pending jobs, submitting for %s with %d producers", name, p.Backlog, r.o.backlogProbe, r.o.producers)

	var rss *rssSampler
	if r.st.orch != nil {
		waited, settled := rssSettled(ctx, r.st.orch.pid(), memorySettleMax)
		p.MemorySettleSeconds, p.RSSBeforeMiB = seconds(waited), mib(settled)
		rss = startRSSSampler(r.st.orch.pid())
	}
	cpu := cpuSampler{st: r.st}
	cpuBefore, t0 := cpu.snapshot(), time.Now()
	capacity := max(1000, int(r.o.backlogProbe.Seconds()*probeRateCap))
	ls := newLoadStats(capacity, false)
	stop := ticker(time.Second, func() { progress("backlog: probe %s: submitted %d", name, ls.sent()) })
	r.sub.closedLoopUntil(ctx, ls, ids, capacity, r.o.producers, time.Now().Add(r.o.backlogProbe))
	stop()
	p.CPU = cpuDelta(cpuBefore, cpu.snapshot(), time.Since(t0), runtime.NumCPU())
	if ls.sent() >= int64(capacity) {
		b.note("the %s probe reached its cap of %d submits before -backlog-probe ended", name, capacity)
	}
	p.Submitted, p.SubmitErrors = int(ls.accepted.Load()), ls.errorCounts()
	d := ls.end.Sub(ls.start)
	p.SubmitSeconds, p.SubmitPerSec = seconds(d), perSec(p.Submitted, d)
	lat := summarize(nonZero(ls.lat))
	p.SubmitHTTPMS = &lat
	if ls.firstErr != nil {
		progress("backlog: probe %s: %d submit errors, the first: %v", name, ls.failed.Load(), ls.firstErr)
	}

	// The memory figures: the metrics now and after probeSettle, the RSS samples until then.
	var rssMetric, heap float64
	scrape := func() {
		m, err := scrapeMetrics(ctx, r.hc, r.st.info.APIURL, metricRSS, metricHeapInuse)
		if err != nil {
			b.note("%v", err)
			return
		}
		rssMetric, heap = max(rssMetric, m[metricRSS]), max(heap, m[metricHeapInuse])
	}
	scrape()
	select {
	case <-ctx.Done():
	case <-time.After(probeSettle):
	}
	scrape()
	p.OrchestratorHeapMiB = mib(int64(heap))
	if rss != nil {
		peak, anon := rss.done()
		p.OrchestratorRSSMiB, p.OrchestratorAnonMiB = mib(peak), mib(anon)
	} else {
		p.OrchestratorRSSMiB = mib(int64(rssMetric))
	}
	progress("backlog: probe %s at %d pending: %.0f submits/s (HTTP p50 %.1f ms, p99 %.1f ms); orchestrator RSS %.1f MiB, heap %.1f MiB; stream %d entries, %.1f MiB",
		name, p.Backlog, p.SubmitPerSec, lat.P50, lat.P99, p.OrchestratorRSSMiB, p.OrchestratorHeapMiB, p.StreamEntries, p.StreamMiB)
	return p
}

// backlogRatios returns the goal's ratios of the probes: RSS and heap at "full" over "base",
// the submit rate at "full" over "empty" (0 when a probe is missing or measured nothing), and
// whether the goal was met (nil when a ratio is missing).
func backlogRatios(probes []BacklogProbe) backlogFigures {
	byName := map[string]BacklogProbe{}
	for _, p := range probes {
		byName[p.Name] = p
	}
	empty, base, full := byName["empty"], byName["base"], byName["full"]
	f := backlogFigures{
		rss:    ratio(full.OrchestratorRSSMiB, base.OrchestratorRSSMiB),
		anon:   ratio(full.OrchestratorAnonMiB, base.OrchestratorAnonMiB),
		heap:   ratio(full.OrchestratorHeapMiB, base.OrchestratorHeapMiB),
		submit: ratio(full.SubmitPerSec, empty.SubmitPerSec),
	}
	if f.rss > 0 && f.submit > 0 {
		met := f.rss <= 1+backlogGoalTolerance && f.submit >= 1-backlogGoalTolerance
		f.goalMet = &met
	}
	return f
}

// backlogFigures are the ratios of the backlog scenario (ScenarioResult.RSSRatio & co.).
type backlogFigures struct {
	rss, anon, heap, submit float64
	goalMet                 *bool
}

// ratio returns num/den with three decimals, 0 when either is not positive.
func ratio(num, den float64) float64 {
	if num <= 0 || den <= 0 {
		return 0
	}
	return round3(num / den)
}

// mergeCounts adds src into *dst, creating it when needed.
func mergeCounts(dst *map[string]int, src map[string]int) {
	if len(src) == 0 {
		return
	}
	if *dst == nil {
		*dst = make(map[string]int, len(src))
	}
	for k, v := range src {
		(*dst)[k] += v
	}
}

// backlogLine is the summary line of the backlog scenario.
func backlogLine(res *ScenarioResult) string {
	s := ""
	for _, p := range res.Probes {
		s += fmt.Sprintf("; %s (%d pending) %.0f submits/s, RSS %.1f MiB (anon %.1f)", p.Name, p.Backlog, p.SubmitPerSec, p.OrchestratorRSSMiB, p.OrchestratorAnonMiB)
	}
	goal := "n/a"
	if res.GoalMet != nil {
		goal = fmt.Sprint(*res.GoalMet)
	}
	return fmt.Sprintf("fill %.0f jobs/s%s; rss_ratio %.3f (anon %.3f), submit_ratio %.3f, goal met: %s",
		res.FillPerSec, s, res.RSSRatio, res.RSSAnonRatio, res.SubmitRatio, goal)
}
