package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Report is the JSON document the bench writes to stdout and to -out.
type Report struct {
	// StartedAt is when the run began (UTC).
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is when the last scenario ended (UTC).
	FinishedAt time.Time `json:"finished_at"`
	// Machine describes where the bench ran; the stack shares it unless -api-url was given.
	Machine Machine `json:"machine"`
	// Command is the bench's command line ("bench" and the arguments: `go run` hides the path).
	Command string `json:"command"`
	// Config holds every flag value.
	Config map[string]any `json:"config"`
	// Stack says what was measured: the bench's own stack or an external one.
	Stack StackInfo `json:"stack"`
	// Scenarios are the results by scenario name, in the order they ran.
	Scenarios map[string]*ScenarioResult `json:"scenarios"`
	// Order lists the scenario names in the order they ran.
	Order []string `json:"order"`
	// LoadAvgEnd is /proc/loadavg at the end (the start's is in Machine).
	LoadAvgEnd string `json:"load_avg_end,omitempty"`
	// Error is set when the run stopped early (a failed setup, Ctrl-C).
	Error string `json:"error,omitempty"`
}

// Machine describes the host of the bench.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model,omitempty"`
	MemoryGiB string `json:"memory_gib,omitempty"`
	GoVersion string `json:"go_version"`
	Hostname  string `json:"hostname"`
	OS        string `json:"os"`
	Kernel    string `json:"kernel,omitempty"`
	// LoadAvg is /proc/loadavg at the start: on a shared machine it says how noisy the run was.
	LoadAvg string `json:"load_avg,omitempty"`
}

// StackInfo says what the bench ran against.
type StackInfo struct {
	// Mode is "own" (processes started by the bench, on MariaDB and Redis), "embedded" (the
	// same in the embedded mode, -embedded) or "external" (-api-url).
	Mode        string `json:"mode"`
	APIURL      string `json:"api_url"`
	Database    string `json:"database,omitempty"`
	RedisPrefix string `json:"redis_prefix,omitempty"`
	Workers     int    `json:"workers"`
	Concurrency int    `json:"concurrency"`
	// LogDir holds the child processes' logs (kept with -keep).
	LogDir string `json:"log_dir,omitempty"`
	// GPUNode is the orchestrator's node (ORCH_NODE_ID) and SimGPUs its simulated GPUs
	// (ORCH_SIM_GPUS), on which the leases scenario places its gpu leases (own stack).
	GPUNode string `json:"gpu_node,omitempty"`
	SimGPUs string `json:"sim_gpus,omitempty"`
}

// ScenarioResult is the outcome of one scenario. Durations are seconds, rates per second,
// latencies milliseconds. Fields that do not apply to a scenario are left out.
type ScenarioResult struct {
	// Jobs is how many of the scenario's jobs reached done.
	Jobs int `json:"jobs"`
	// Submitted is how many submits the API accepted; SubmitErrors counts the others by error code.
	Submitted    int            `json:"submitted"`
	SubmitErrors map[string]int `json:"submit_errors,omitempty"`
	// Seconds is the measured window (see Window) and JobsPerSec = Jobs / Seconds.
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	// Window says what Seconds spans.
	Window string `json:"window"`
	// WallSeconds and WallJobsPerSec are the same window measured by the bench's clock with its
	// polling of the database (waitDone: every 100 ms near the end; a cross-check of Seconds).
	WallSeconds    float64 `json:"wall_seconds,omitempty"`
	WallJobsPerSec float64 `json:"wall_jobs_per_sec,omitempty"`
	// SubmitSeconds is the submit phase (first request sent to last answer received).
	SubmitSeconds float64 `json:"submit_seconds"`
	SubmitPerSec  float64 `json:"submit_per_sec"`
	// TargetRate is the offered submit rate of an open-loop scenario.
	TargetRate float64 `json:"target_rate,omitempty"`
	// SubmitHTTPMS is the client-side latency of POST /jobs/submit.
	SubmitHTTPMS *Percentiles `json:"submit_http_ms,omitempty"`
	// SendLagMS is how late the open-loop scheduler sent requests (scheduled → sent).
	SendLagMS *Percentiles `json:"send_lag_ms,omitempty"`
	// LatencyMS is submit → handler start per job: started_at − created_at from the database.
	LatencyMS *Percentiles `json:"latency_ms,omitempty"`
	// EndToEndMS is submit → done per job: finished_at − created_at from the database.
	EndToEndMS *Percentiles `json:"end_to_end_ms,omitempty"`
	// Probes are the backlog scenario's probes, in order: empty queue, backlogBase, -backlog.
	Probes []BacklogProbe `json:"probes,omitempty"`
	// FillJobs, FillSeconds and FillPerSec are the backlog scenario's batch fills
	// (POST /jobs/submit_batch) together; FillHTTPMS is the latency of one batch request.
	FillJobs    int          `json:"fill_jobs,omitempty"`
	FillSeconds float64      `json:"fill_seconds,omitempty"`
	FillPerSec  float64      `json:"fill_per_sec,omitempty"`
	FillHTTPMS  *Percentiles `json:"fill_http_ms,omitempty"`
	// RSSRatio is the orchestrator's RSS at -backlog over its RSS at backlogBase, HeapRatio the
	// same of its Go heap, SubmitRatio the submit rate at -backlog over the empty queue's.
	RSSRatio float64 `json:"rss_ratio,omitempty"`
	// RSSAnonRatio is the same of the RSS less the binary's pages (RssAnon): the stricter
	// figure, as those pages are a constant of the run that RSSRatio divides by too.
	RSSAnonRatio float64 `json:"rss_anon_ratio,omitempty"`
	HeapRatio    float64 `json:"heap_ratio,omitempty"`
	SubmitRatio  float64 `json:"submit_ratio,omitempty"`
	// GoalMet says whether RSSRatio ≤ 1.2 and SubmitRatio ≥ 0.8 (the performance goal).
	GoalMet *bool `json:"goal_met,omitempty"`
	// LeaseModes are the leases scenario's figures by lease mode (gpu, cpu) and LeaseGPUs what
	// GET /gpus showed of the gpu leases' node.
	LeaseModes []LeaseMode    `json:"lease_modes,omitempty"`
	LeaseGPUs  *LeaseGPUCheck `json:"lease_gpus,omitempty"`
	// Release is the release → next start figures of the GPU scenarios (release, schedule).
	Release *ReleaseResult `json:"release,omitempty"`
	// Schedule is the schedule scenario's placement figures.
	Schedule *PlacementResult `json:"schedule,omitempty"`
	// ServerMS is the orchestrator's own time of the scenario's requests by kind, from its
	// request-duration histogram: "grant" and "release" in the leases scenario; "submit",
	// "claim" and "complete" (the workers' calls) in streaming and latency, the workers'
	// calls only in burndown.
	ServerMS map[string]*ServerLatency `json:"server_ms,omitempty"`
	// AdmissionModes are the admission scenario's figures by policy of the bench's agent, and
	// LimiterCallMS the latency of one token-bucket call (a Redis round trip) made by the bench.
	AdmissionModes []AdmissionMode `json:"admission_modes,omitempty"`
	LimiterCallMS  *Percentiles    `json:"limiter_call_ms,omitempty"`
	// Statuses counts the scenario's jobs by status at the end.
	Statuses map[string]int `json:"statuses,omitempty"`
	// CPU is the CPU time each part of the stack used during the scenario (Linux only).
	CPU map[string]CPUUse `json:"cpu,omitempty"`
	// TimedOut is true when the scenario hit -timeout; the figures are then partial.
	TimedOut bool `json:"timed_out,omitempty"`
	// Error is why the scenario stopped, when it did not complete.
	Error string `json:"error,omitempty"`
	// Notes are caveats of this run (e.g. workers could not be stopped for burndown).
	Notes []string `json:"notes,omitempty"`
}

// machineInfo collects the Machine description; missing /proc files leave fields empty.
func machineInfo() Machine {
	host, _ := os.Hostname()
	m := Machine{
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		Hostname:  host,
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		CPUModel:  procField("/proc/cpuinfo", "model name"),
		Kernel:    strings.TrimSpace(readSmall("/proc/sys/kernel/osrelease")),
	}
	m.LoadAvg = loadAvg()
	if kb := procField("/proc/meminfo", "MemTotal"); kb != "" {
		if n, err := strconv.ParseFloat(strings.TrimSuffix(kb, " kB"), 64); err == nil {
			m.MemoryGiB = strconv.FormatFloat(n/(1<<20), 'f', 1, 64)
		}
	}
	return m
}

// loadAvg returns the 1, 5 and 15 minute load averages, "" when unknown.
func loadAvg() string {
	if f := strings.Fields(readSmall("/proc/loadavg")); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

// readSmall returns the content of a small file, or "" when it cannot be read.
func readSmall(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// procField returns the value of the first "key : value" line of a /proc file.
func procField(path, key string) string {
	sc := bufio.NewScanner(strings.NewReader(readSmall(path)))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// reportPath is where the report of a run started at started goes: out when given, else
// gpu-orchestrator/bench/results-<start, UTC>.json in the user's cache directory
// ($XDG_CACHE_HOME, else ~/.cache on Linux), else in the temporary directory. Never the working
// directory: a run from a checkout leaves no result in the tree.
func reportPath(out string, started time.Time) string {
	if out != "" {
		return out
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	name := "results-" + started.UTC().Format("20060102T150405Z") + ".json"
	return filepath.Join(dir, "gpu-orchestrator", "bench", name)
}

// writeReport writes the report as indented JSON to w and, when path is not empty, to path.
func writeReport(r *Report, w io.Writer, path string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if path == "" {
		return nil
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
