package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/client"
)

// The release scenario: GPU jobs that cannot share a GPU queue up on one node, and the bench
// measures, from the job and lease rows, how long each GPU stays idle between the end of one
// job and the start of the next one on it (started_at − finished_at of the job before it on
// that GPU): the time from a release to the next start. A worker of the bench's own, on the
// orchestrator's simulated node (two 24 GiB GPUs), serves the type; each job asks for
// gpuJobMB, so one GPU holds one job, and the leader's scheduler places the next one in line
// on a GPU as soon as its lease is released (engine/schedule.go).
const (
	releaseType    = "gpu_release"
	releaseSleepMS = 200
	// releaseTrials is how many gaps the scenario measures: the jobs after the first one on
	// each GPU.
	releaseTrials = 50
	// gpuJobMB is what every job of the GPU scenarios (release, schedule) asks of its GPU: one
	// fits on a simulated 24 GiB GPU, two do not.
	gpuJobMB = 16000
	// gpuWorkerConcurrency is how many jobs a GPU worker of the bench may run at once: more
	// than its node's GPUs hold, so the room, not the worker, bounds them.
	gpuWorkerConcurrency = 8
)

// gpuTypesConfig is the job types of the GPU scenarios, in the bench's own stack's config:
// both sleep jobs of gpuJobMB, each scenario on its own type (and its own placement series).
func gpuTypesConfig() string {
	var s string
	for _, typ := range []string{releaseType, scheduleType} {
		s += fmt.Sprintf("  %s:\n    handler: sleep\n    gpu_memory_mb: %d\n", typ, gpuJobMB)
	}
	return s
}

// ReleaseResult is what a GPU scenario measured of the GPUs' idle time between jobs.
type ReleaseResult struct {
	// GPUs is how many GPUs (of every node) the jobs ran on; GapMS the release → next start
	// times on them.
	GPUs  int         `json:"gpus"`
	GapMS Percentiles `json:"gap_ms"`
	// ToPlacedMS and PlacedToStartMS split each gap at the next job's placement (its job.placed
	// audit row, stamped with the time its pass began): release → the pass that placed it, and
	// placed → start (the rest of that pass, its commit, the node stream, the worker's claim
	// and its start report). Empty when the jobs were not placed by the scheduler
	// (scheduler.disabled).
	ToPlacedMS      *Percentiles `json:"to_placed_ms,omitempty"`
	PlacedToStartMS *Percentiles `json:"placed_to_start_ms,omitempty"`
	// PlacedEarly counts the placements stamped before the release that made their room (they
	// count as 0 in ToPlacedMS): a pass takes its time when it starts, before it locks the
	// GPU rows and reads their reservations, so it sees a release that commits in between.
	PlacedEarly int `json:"placed_early,omitempty"`
	// Overlaps counts jobs that started on a GPU before the job before them on it had ended
	// (an over-commit: 0 is the only right answer).
	Overlaps int `json:"overlaps"`
}

func (r *runner) release(ctx context.Context, ids idSpace) *ScenarioResult {
	res := &ScenarioResult{Window: "first start → last end of the scenario's jobs (job rows)"}
	r.runGPUJobs(ctx, ids, res, gpuJobs{typ: releaseType, nodes: []string{r.st.info.GPUNode},
		n: releaseTrials + benchSimGPUCount, sleepMS: releaseSleepMS})
	return res
}

// gpuJobs is one run of a GPU scenario: n jobs of typ, each a sleep of sleepMS, submitted at
// once to GPU workers of the bench's own, one on each of nodes (simulated, benchSimGPUs).
type gpuJobs struct {
	typ        string
	nodes      []string
	n, sleepMS int
}

// runGPUJobs runs g: it starts the workers, waits until their nodes report their GPUs, submits
// the jobs one by one, waits until they have ended and reads where and when each ran. It fills
// res (submits, the done jobs' window, Release) and returns the runs; on a failure res.Error
// says why and the runs are nil.
func (r *runner) runGPUJobs(ctx context.Context, ids idSpace, res *ScenarioResult, g gpuJobs) []gpuRun {
	if !r.st.owned() {
		res.Error = "needs the bench's own stack (its GPU job types and simulated nodes); not run with -api-url"
		return nil
	}
	ws, err := r.st.startGPUWorkers(ctx, g.typ, g.nodes)
	defer func() {
		for _, w := range ws {
			if err := w.stop(stopGrace); err != nil {
				res.Notes = append(res.Notes, "stop a GPU worker: "+err.Error())
			}
		}
	}()
	if err != nil {
		res.Error = err.Error()
		return nil
	}
	for _, node := range g.nodes {
		if err := r.st.waitGPUs(ctx, node); err != nil {
			res.Error = err.Error()
			return nil
		}
	}
	if err := r.waitLeader(ctx); err != nil {
		res.Error = err.Error()
		return nil
	}
	payload, _ := json.Marshal(map[string]int{"ms": g.sleepMS})
	progress("%s: submitting %d jobs (a sleep of %d ms, %d MB of a GPU) to the GPU workers of %d node(s)",
		g.typ, g.n, g.sleepMS, gpuJobMB, len(g.nodes))
	t0 := time.Now()
	for i := range g.n {
		if _, err := r.st.api.Submit(ctx, client.SubmitRequest{JobID: ids.id(i), Type: g.typ, Agent: benchAgent,
			Payload: payload}); err != nil {
			res.Error = "submit: " + err.Error()
			return nil
		}
		res.Submitted++
	}
	d := time.Since(t0)
	res.SubmitSeconds, res.SubmitPerSec = seconds(d), perSec(res.Submitted, d)
	rr := *r
	rr.jdb.jobType = g.typ
	if _, err := rr.waitDone(ctx, g.typ, ids, g.n); err != nil {
		res.Error = err.Error()
		return nil
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), measureTimeout)
	defer cancel()
	runs, err := rr.jdb.gpuRuns(mctx, ids.prefix)
	if err != nil {
		res.Error = err.Error()
		return nil
	}
	res.Release = releaseOf(runs)
	res.Jobs = len(runs)
	if len(runs) > 0 {
		first, last := runs[0].start, runs[0].end
		for _, g := range runs {
			first, last = minTime(first, g.start), maxTime(last, g.end)
		}
		res.Seconds = seconds(last.Sub(first))
		res.JobsPerSec = perSec(len(runs), last.Sub(first))
	}
	return runs
}

// metricIsLeader is 1 on the orchestrator instance that leads (and runs the scheduler).
const metricIsLeader = "gpu_orchestrator_is_leader"

// waitLeader polls GET /metrics until the orchestrator leads, up to readyWait: its first
// election comes up to a second after its start (leader.Config.Stagger), and only the leader
// places GPU jobs, so jobs submitted before would wait for it and the figures with them.
func (r *runner) waitLeader(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	t0 := time.Now()
	for {
		m, err := scrapeMetrics(ctx, r.hc, r.st.info.APIURL, metricIsLeader)
		if err == nil && m[metricIsLeader] == 1 {
			if d := time.Since(t0); d > 100*time.Millisecond {
				progress("the orchestrator leads after %.1fs", d.Seconds())
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the orchestrator did not lead within %s (it places the GPU jobs)", readyWait)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// gpuRun is one done job of a GPU scenario: the GPU it ran on, and when it was submitted,
// placed (zero without a job.placed row of its lease), started and ended.
type gpuRun struct {
	job                         string
	node                        string
	gpu                         int
	created, placed, start, end time.Time
}

// gpuKey names one GPU of the cluster.
type gpuKey struct {
	node string
	gpu  int
}

// releaseOf measures, per GPU, the gaps between one job's end and the next one's start.
func releaseOf(runs []gpuRun) *ReleaseResult {
	byGPU := map[gpuKey][]gpuRun{}
	for _, g := range runs {
		k := gpuKey{g.node, g.gpu}
		byGPU[k] = append(byGPU[k], g)
	}
	out := &ReleaseResult{GPUs: len(byGPU)}
	var gaps, toPlaced, toStart []time.Duration
	for _, rs := range byGPU {
		slices.SortFunc(rs, func(a, b gpuRun) int { return a.start.Compare(b.start) })
		for i := 1; i < len(rs); i++ {
			gap := rs[i].start.Sub(rs[i-1].end)
			if gap < 0 {
				out.Overlaps++
				continue
			}
			gaps = append(gaps, gap)
			if p := rs[i].placed; !p.IsZero() {
				if p.Before(rs[i-1].end) {
					out.PlacedEarly++
				}
				toPlaced, toStart = append(toPlaced, max(p.Sub(rs[i-1].end), 0)), append(toStart, rs[i].start.Sub(p))
			}
		}
	}
	out.GapMS = summarize(gaps)
	if len(toPlaced) > 0 {
		p, s := summarize(toPlaced), summarize(toStart)
		out.ToPlacedMS, out.PlacedToStartMS = &p, &s
	}
	return out
}

// gpuRuns reads the done jobs of the scenario with the GPU of the lease each ran under (its
// latest: an earlier one is a placement that expired unclaimed) and that lease's job.placed
// time.
func (j jobsDB) gpuRuns(ctx context.Context, prefix string) ([]gpuRun, error) {
	rows, err := j.db.QueryContext(ctx, `SELECT j.job_id, l.node_id, l.gpu_index, `+j.micros("l.created_at")+`, `+
		j.micros("a.ts")+`, `+j.micros("j.created_at")+`, `+j.micros("j.started_at")+`, `+j.micros("j.finished_at")+
		` FROM orchestrator_jobs j JOIN orchestrator_leases l ON l.job_id = j.job_id
		LEFT JOIN orchestrator_audit a ON a.job_id = j.job_id AND a.event_type = 'job.placed' AND a.lease_token = l.token
		WHERE j.job_id `+j.like()+` AND j.status = 'done'`, likePrefix(prefix))
	if err != nil {
		return nil, fmt.Errorf("read gpu runs: %w", err)
	}
	defer rows.Close()
	latest := map[string]time.Time{} // job → creation of the lease kept
	byJob := map[string]gpuRun{}
	for rows.Next() {
		var (
			job, node                               string
			gpu                                     sql.NullInt64
			leased, placed, created, started, ended sql.NullInt64
		)
		if err := rows.Scan(&job, &node, &gpu, &leased, &placed, &created, &started, &ended); err != nil {
			return nil, fmt.Errorf("read gpu runs: %w", err)
		}
		if !gpu.Valid || !started.Valid || !ended.Valid {
			continue
		}
		if at, ok := latest[job]; ok && !microsTime(leased).After(at) {
			continue
		}
		latest[job] = microsTime(leased)
		byJob[job] = gpuRun{job: job, node: node, gpu: int(gpu.Int64), created: microsTime(created),
			placed: microsTime(placed), start: microsTime(started), end: microsTime(ended)}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read gpu runs: %w", err)
	}
	out := make([]gpuRun, 0, len(byJob))
	for _, g := range byJob {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b gpuRun) int { return a.start.Compare(b.start) })
	return out, nil
}

// releaseLine is the summary line of the release scenario.
func releaseLine(res *ScenarioResult) string {
	if res.Release == nil || res.Release.GapMS.Count == 0 {
		return "no gap measured"
	}
	return fmt.Sprintf("%d jobs on %d GPUs; %s", res.Jobs, res.Release.GPUs, gapLine(res.Release))
}

// gapLine is the release → next start part of a GPU scenario's summary line.
func gapLine(rel *ReleaseResult) string {
	g := rel.GapMS
	s := fmt.Sprintf("release → next start p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d", g.P50, g.P99, g.Max, g.Count)
	if p := rel.ToPlacedMS; p != nil {
		s += fmt.Sprintf(" (release → placed p50 %.1f, p99 %.1f)", p.P50, p.P99)
	}
	return s + fmt.Sprintf("; overlaps %d", rel.Overlaps)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
