package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// The schedule scenario: a backlog of GPU jobs on a full cluster of simulated nodes, placed by
// the leader's scheduler (engine/schedule.go). Two nodes of the bench's own, each with the
// simulated GPUs benchSimGPUs and a GPU worker of scheduleType, get scheduleJobs jobs at once,
// each a sleep of scheduleSleepMS asking gpuJobMB, so that one GPU holds one job and all but
// four wait. The bench measures, from the job, lease and audit rows: how fast the jobs were
// placed while the backlog lasted (job.placed rows), submit → start of every job, and each
// GPU's time from one job's release to the next one's start there (as the release scenario
// does).
const (
	scheduleType    = "gpu_schedule"
	scheduleSleepMS = 100
	scheduleJobs    = 200
	scheduleNodes   = 2
	// metricPlacements counts the scheduler's placements by type.
	metricPlacements = "gpu_orchestrator_scheduler_placements_total"
)

// PlacementResult is what the schedule scenario measured of the scheduler's placements.
type PlacementResult struct {
	// Nodes and GPUs are the cluster the jobs ran on; JobsPerNode how many ran on each node.
	Nodes       int            `json:"nodes"`
	GPUs        int            `json:"gpus"`
	JobsPerNode map[string]int `json:"jobs_per_node"`
	// Placements counts the job.placed audit rows of the scenario's jobs and Jobs the jobs
	// they placed; a job placed twice had its first placement expire unclaimed.
	Placements int `json:"placements"`
	Jobs       int `json:"jobs"`
	// Passes counts the scheduler passes that placed them (distinct job.placed times: one pass
	// writes all its rows at its own time); MaxPerPass is the most one pass placed.
	Passes     int `json:"passes"`
	MaxPerPass int `json:"max_per_pass"`
	// MetricPlacements is the growth of gpu_orchestrator_scheduler_placements_total of the
	// scenario's type over the run (-1 when GET /metrics failed): a check of Placements.
	MetricPlacements int `json:"metric_placements"`
	// BacklogSeconds is the first submit (created_at) → the last placement, and PerSec is
	// Jobs over it: placements per second while the backlog lasted. CeilingPerSec is what the
	// cluster could run, GPUs × 1000 / scheduleSleepMS, and Efficiency PerSec over it (each
	// job's gap before it on its GPU is the difference).
	BacklogSeconds float64 `json:"backlog_seconds"`
	PerSec         float64 `json:"per_sec"`
	CeilingPerSec  float64 `json:"ceiling_per_sec"`
	Efficiency     float64 `json:"efficiency"`
	// SubmitToPlacedMS is each job's created_at → its first placement, and PlacedToStartMS
	// the placement it ran under → its started_at (a placement is stamped with the time its
	// pass began: the rest of the pass falls in PlacedToStartMS).
	SubmitToPlacedMS Percentiles `json:"submit_to_placed_ms"`
	PlacedToStartMS  Percentiles `json:"placed_to_start_ms"`
}

func (r *runner) schedule(ctx context.Context, ids idSpace) *ScenarioResult {
	res := &ScenarioResult{Window: "first start → last end of the scenario's jobs (job rows); placements: first submit → last placement"}
	nodes := make([]string, scheduleNodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("%s-n%d", r.st.info.GPUNode, i+1)
	}
	before := r.placementCount(ctx)
	runs := r.runGPUJobs(ctx, ids, res, gpuJobs{typ: scheduleType, nodes: nodes, n: scheduleJobs, sleepMS: scheduleSleepMS})
	if runs == nil {
		return res
	}
	after := r.placementCount(ctx)
	r.latencies(ctx, res, ids)
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), measureTimeout)
	defer cancel()
	placed, err := r.jdb.placements(mctx, ids.prefix)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Schedule = placementOf(runs, placed, len(nodes)*benchSimGPUCount, scheduleSleepMS*time.Millisecond)
	res.Schedule.MetricPlacements = -1
	if before >= 0 && after >= 0 {
		res.Schedule.MetricPlacements = after - before
	}
	return res
}

// placementCount reads gpu_orchestrator_scheduler_placements_total of scheduleType; -1, with
// a progress line, when GET /metrics fails.
func (r *runner) placementCount(ctx context.Context) int {
	s, err := scrapeSamples(ctx, r.hc, r.st.info.APIURL, metricPlacements)
	if err != nil {
		progress("schedule: %v", err)
		return -1
	}
	n := 0.0
	for _, x := range s {
		if x.name == metricPlacements && x.labels["type"] == scheduleType {
			n += x.value
		}
	}
	return int(n)
}

// placement is one job.placed audit row: the job and the time of the pass that placed it.
type placement struct {
	job string
	at  time.Time
}

// placementOf computes the scenario's placement figures from its runs and its job.placed rows,
// on a cluster of gpus GPUs running jobs of sleep each.
func placementOf(runs []gpuRun, placed []placement, gpus int, sleep time.Duration) *PlacementResult {
	out := &PlacementResult{GPUs: gpus, JobsPerNode: map[string]int{}, Placements: len(placed)}
	first := map[string]time.Time{} // job → its first placement
	perPass := map[time.Time]int{}
	var last time.Time
	for _, p := range placed {
		if at, ok := first[p.job]; !ok || p.at.Before(at) {
			first[p.job] = p.at
		}
		perPass[p.at]++
		last = maxTime(last, p.at)
	}
	out.Jobs, out.Passes = len(first), len(perPass)
	for _, n := range perPass {
		out.MaxPerPass = max(out.MaxPerPass, n)
	}
	var submitted time.Time
	var toPlaced, toStart []time.Duration
	for _, g := range runs {
		out.JobsPerNode[g.node]++
		if submitted.IsZero() || g.created.Before(submitted) {
			submitted = g.created
		}
		if at, ok := first[g.job]; ok {
			toPlaced = append(toPlaced, at.Sub(g.created))
		}
		if !g.placed.IsZero() {
			toStart = append(toStart, g.start.Sub(g.placed))
		}
	}
	out.Nodes = len(out.JobsPerNode)
	out.SubmitToPlacedMS, out.PlacedToStartMS = summarize(toPlaced), summarize(toStart)
	if !submitted.IsZero() && last.After(submitted) {
		d := last.Sub(submitted)
		out.BacklogSeconds, out.PerSec = seconds(d), perSec(out.Jobs, d)
	}
	if sleep > 0 {
		out.CeilingPerSec = round3(float64(gpus) / sleep.Seconds())
		out.Efficiency = round3(out.PerSec / out.CeilingPerSec)
	}
	return out
}

// placements reads the job.placed audit rows of the scenario's jobs, by time.
func (j jobsDB) placements(ctx context.Context, prefix string) ([]placement, error) {
	rows, err := j.db.QueryContext(ctx, `SELECT job_id, `+j.micros("ts")+` FROM orchestrator_audit
		WHERE job_id `+j.like()+` AND event_type = 'job.placed'`, likePrefix(prefix))
	if err != nil {
		return nil, fmt.Errorf("read placements: %w", err)
	}
	defer rows.Close()
	var out []placement
	for rows.Next() {
		var p placement
		var at int64
		if err := rows.Scan(&p.job, &at); err != nil {
			return nil, fmt.Errorf("read placements: %w", err)
		}
		p.at = time.UnixMicro(at).UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read placements: %w", err)
	}
	slices.SortFunc(out, func(a, b placement) int { return a.at.Compare(b.at) })
	return out, nil
}

// scheduleLine is the summary line of the schedule scenario.
func scheduleLine(res *ScenarioResult) string {
	p := res.Schedule
	if p == nil || res.Release == nil {
		return "nothing measured"
	}
	s := fmt.Sprintf("%d jobs on %d GPUs of %d nodes; %.1f placements/s over %.2fs (%.2f of the %.0f/s ceiling, %d passes)",
		res.Jobs, p.GPUs, p.Nodes, p.PerSec, p.BacklogSeconds, p.Efficiency, p.CeilingPerSec, p.Passes)
	if l := res.LatencyMS; l != nil {
		s += fmt.Sprintf("; submit → start p50 %.1f ms, p99 %.1f ms", l.P50, l.P99)
	}
	s += fmt.Sprintf("; placed → start p50 %.1f ms, p99 %.1f ms", p.PlacedToStartMS.P50, p.PlacedToStartMS.P99)
	return s + "; " + gapLine(res.Release)
}
