package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// The table: one row per figure, one column per system, and the orchestrator's ratio to each
// peer, written so that above 1 is better for the orchestrator (rates: ours over theirs;
// latencies: theirs over ours).

// Columns of the table, in order.
var systems = []string{"orchestrator", "river", "asynq", "asynq_fsync"}

// row is one figure of every system (0: not measured) and the orchestrator's ratios.
type row struct {
	Figure string             `json:"figure"`
	Unit   string             `json:"unit"`
	Higher bool               `json:"higher_is_better"`
	Values map[string]float64 `json:"values"`
	// Ratios is the orchestrator's standing against each peer (above 1: better).
	Ratios map[string]float64 `json:"ratios"`
}

// figure reads one number of a scenario's result.
type figure struct {
	name, unit, scenario string
	higher               bool
	read                 func(result) float64
}

// result is what the reports say of one scenario (the fields compare reads).
type result struct {
	JobsPerSec float64 `json:"jobs_per_sec"`
	LatencyMS  *struct {
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
	} `json:"latency_ms"`
}

var figures = []figure{
	{"burndown", "jobs/s", "burndown", true, func(r result) float64 { return r.JobsPerSec }},
	{"streaming", "jobs/s", "streaming", true, func(r result) float64 { return r.JobsPerSec }},
	{"latency run", "jobs/s", "latency", true, func(r result) float64 { return r.JobsPerSec }},
	{"submit → start p50", "ms", "latency", false, func(r result) float64 {
		if r.LatencyMS == nil {
			return 0
		}
		return r.LatencyMS.P50
	}},
	{"submit → start p99", "ms", "latency", false, func(r result) float64 {
		if r.LatencyMS == nil {
			return 0
		}
		return r.LatencyMS.P99
	}},
}

// table reads the reports: "orchestrator" (the bench's: scenarios.<name>), "peers" (results.
// asynq and results.river) and "asynq_fsync" (results.asynq).
func table(reports map[string]json.RawMessage) ([]row, error) {
	scen := map[string]map[string]result{} // system → scenario → result
	if raw, ok := reports["orchestrator"]; ok {
		var r struct {
			Scenarios map[string]result `json:"scenarios"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("read the orchestrator's report: %w", err)
		}
		scen["orchestrator"] = r.Scenarios
	}
	for name, sys := range map[string][]string{"peers": {"asynq", "river"}, "asynq_fsync": {"asynq"}} {
		raw, ok := reports[name]
		if !ok {
			continue
		}
		var r struct {
			Results map[string]map[string]result `json:"results"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("read the %s report: %w", name, err)
		}
		for _, s := range sys {
			key := s
			if name == "asynq_fsync" {
				key = "asynq_fsync"
			}
			scen[key] = r.Results[s]
		}
	}
	var out []row
	for _, f := range figures {
		r := row{Figure: f.name, Unit: f.unit, Higher: f.higher, Values: map[string]float64{}, Ratios: map[string]float64{}}
		for _, s := range systems {
			if res, ok := scen[s][f.scenario]; ok {
				r.Values[s] = f.read(res)
			}
		}
		ours := r.Values["orchestrator"]
		for _, s := range systems[1:] {
			theirs := r.Values[s]
			switch {
			case ours <= 0 || theirs <= 0:
			case f.higher:
				r.Ratios[s] = ours / theirs
			default:
				r.Ratios[s] = theirs / ours
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// printTable writes the table as Markdown: the figures, then the ratios.
func printTable(w io.Writer, rows []row) {
	head := []string{"figure", "GPU Orchestrator", "River", "asynq", "asynq, Redis fsync always", "vs River", "vs asynq", "vs asynq fsync"}
	fmt.Fprintln(w, "| "+strings.Join(head, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(head)))
	for _, r := range rows {
		cells := []string{r.Figure + " (" + r.Unit + ")"}
		for _, s := range systems {
			cells = append(cells, num(r.Values[s]))
		}
		for _, s := range systems[1:] {
			if v, ok := r.Ratios[s]; ok {
				cells = append(cells, fmt.Sprintf("%.2f×", v))
			} else {
				cells = append(cells, "–")
			}
		}
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
	}
	fmt.Fprintln(w, "\nratios: above 1 is better for the orchestrator (rates: ours over theirs; latencies: theirs over ours)")
}

func num(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}
