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
// releaseMB, so one GPU holds one job, and the worker, given room for more, reads the others,
// is refused them for room, and claims them again as room frees (worker/deferred.go).
const (
	releaseType    = "gpu_release"
	releaseMB      = 16000
	releaseSleepMS = 200
	// releaseTrials is how many gaps the scenario measures: the jobs after the first one on
	// each GPU.
	releaseTrials = 50
)

// releaseConfig is the job type of the release scenario, in the bench's own stack's config.
func releaseConfig() string {
	return fmt.Sprintf("  %s:\n    handler: sleep\n    gpu_memory_mb: %d\n", releaseType, releaseMB)
}

// ReleaseResult is what the release scenario measured.
type ReleaseResult struct {
	// GPUs is how many GPUs the jobs ran on; GapMS the release → next start times on them.
	GPUs  int         `json:"gpus"`
	GapMS Percentiles `json:"gap_ms"`
	// Overlaps counts jobs that started on a GPU before the job before them on it had ended
	// (an over-commit: 0 is the only right answer).
	Overlaps int `json:"overlaps"`
}

func (r *runner) release(ctx context.Context, ids idSpace) *ScenarioResult {
	res := &ScenarioResult{Window: "first start → last end of the scenario's jobs (job rows)"}
	if !r.st.owned() {
		res.Error = "needs the bench's own stack (its GPU job type and simulated node); not run with -api-url"
		return res
	}
	w, err := r.st.startGPUWorker(ctx)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer func() {
		if err := w.stop(stopGrace); err != nil {
			res.Notes = append(res.Notes, "stop the GPU worker: "+err.Error())
		}
	}()
	gpus := 2 // benchSimGPUs
	n := releaseTrials + gpus
	payload, _ := json.Marshal(map[string]int{"ms": releaseSleepMS})
	t0 := time.Now()
	for i := range n {
		if _, err := r.st.api.Submit(ctx, client.SubmitRequest{JobID: ids.id(i), Type: releaseType, Agent: benchAgent,
			Payload: payload}); err != nil {
			res.Error = "submit: " + err.Error()
			return res
		}
		res.Submitted++
	}
	res.SubmitSeconds = time.Since(t0).Seconds()
	rr := *r
	rr.jdb.jobType = releaseType
	if _, err := rr.waitDone(ctx, "release", ids, n); err != nil {
		res.Error = err.Error()
		return res
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), measureTimeout)
	defer cancel()
	runs, err := rr.jdb.gpuRuns(mctx, ids.prefix)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Release = releaseOf(runs)
	res.Jobs = len(runs)
	if len(runs) > 0 {
		first, last := runs[0].start, runs[0].end
		for _, g := range runs {
			first, last = minTime(first, g.start), maxTime(last, g.end)
		}
		res.Seconds = last.Sub(first).Seconds()
		res.JobsPerSec = perSec(len(runs), last.Sub(first))
	}
	return res
}

// gpuRun is one done job of the release scenario: the GPU it ran on and when.
type gpuRun struct {
	gpu        int
	start, end time.Time
}

// releaseOf measures, per GPU, the gaps between one job's end and the next one's start.
func releaseOf(runs []gpuRun) *ReleaseResult {
	byGPU := map[int][]gpuRun{}
	for _, g := range runs {
		byGPU[g.gpu] = append(byGPU[g.gpu], g)
	}
	out := &ReleaseResult{GPUs: len(byGPU)}
	var gaps []time.Duration
	for _, rs := range byGPU {
		slices.SortFunc(rs, func(a, b gpuRun) int { return a.start.Compare(b.start) })
		for i := 1; i < len(rs); i++ {
			gap := rs[i].start.Sub(rs[i-1].end)
			if gap < 0 {
				out.Overlaps++
				continue
			}
			gaps = append(gaps, gap)
		}
	}
	out.GapMS = summarize(gaps)
	return out
}

// gpuRuns reads the done jobs of the scenario with the GPU of their lease (each ran once: one
// lease per job).
func (j jobsDB) gpuRuns(ctx context.Context, prefix string) ([]gpuRun, error) {
	rows, err := j.db.QueryContext(ctx, `SELECT l.gpu_index, `+j.micros("j.started_at")+`, `+j.micros("j.finished_at")+
		` FROM orchestrator_jobs j JOIN orchestrator_leases l ON l.job_id = j.job_id
		WHERE j.job_id `+j.like()+` AND j.status = 'done'`, likePrefix(prefix))
	if err != nil {
		return nil, fmt.Errorf("read gpu runs: %w", err)
	}
	defer rows.Close()
	var out []gpuRun
	for rows.Next() {
		var (
			gpu             sql.NullInt64
			started, ending sql.NullInt64
		)
		if err := rows.Scan(&gpu, &started, &ending); err != nil {
			return nil, fmt.Errorf("read gpu runs: %w", err)
		}
		if gpu.Valid && started.Valid && ending.Valid {
			out = append(out, gpuRun{gpu: int(gpu.Int64), start: microsTime(started), end: microsTime(ending)})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read gpu runs: %w", err)
	}
	return out, nil
}

// releaseLine is the summary line of the release scenario.
func releaseLine(res *ScenarioResult) string {
	if res.Release == nil || res.Release.GapMS.Count == 0 {
		return "no gap measured"
	}
	g := res.Release.GapMS
	return fmt.Sprintf("%d jobs on %d GPUs; release → next start p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d; overlaps %d",
		res.Jobs, res.Release.GPUs, g.P50, g.P99, g.Max, g.Count, res.Release.Overlaps)
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
