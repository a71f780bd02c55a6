package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/client"
)

// progress reports a wait's progress on standard error: on a terminal one line redrawn after
// every poll round, elsewhere (CI logs, files) one line every progressEvery and a last one when
// the wait ends.
type progress struct {
	w     io.Writer
	tty   bool
	now   func() time.Time
	start time.Time
	last  time.Time // when the last line was printed (not a terminal)
	drawn bool      // a progress line is on the terminal without its newline
}

// update shows the state of jobs after a round; final says the wait is over.
func (p *progress) update(jobs []client.Job, final bool) {
	now := p.now()
	line := summarize(jobs) + " (" + fmtAge(max(now.Sub(p.start), 0)) + ")"
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.drawn = true
		return
	}
	if final && p.last.IsZero() {
		return // finished at once: the result says it all
	}
	if !final && !p.last.IsZero() && now.Sub(p.last) < progressEvery {
		return
	}
	p.last = now
	fmt.Fprintln(p.w, "waiting: "+line)
}

// warn reports a passing error on its own line.
func (p *progress) warn(err error) {
	p.end()
	fmt.Fprintf(p.w, "orchctl: %s (retrying)\n", err)
}

// end finishes a progress line left on the terminal.
func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// summarize counts jobs by state: "3/10 finished: 2 done, 1 dead_letter, 1 running, 6 pending".
// Jobs not fetched yet count as "unknown".
func summarize(jobs []client.Job) string {
	counts := map[string]int{}
	finished := 0
	for _, j := range jobs {
		st := j.Status
		if st == "" {
			st = "unknown"
		}
		counts[st]++
		if terminal(st) {
			finished++
		}
	}
	parts := make([]string, 0, len(counts))
	for _, st := range append(append([]string{}, terminalFirst...), "unknown") {
		if n := counts[st]; n > 0 {
			parts = append(parts, strconv.Itoa(n)+" "+st)
			delete(counts, st)
		}
	}
	for _, st := range slices.Sorted(maps.Keys(counts)) { // states this orchctl does not know
		parts = append(parts, strconv.Itoa(counts[st])+" "+st)
	}
	return fmt.Sprintf("%d/%d finished: %s", finished, len(jobs), strings.Join(parts, ", "))
}

// terminalFirst orders the states of a progress line: the finished ones, then the open ones from
// the most advanced.
var terminalFirst = []string{statusDone, statusDeadLetter, statusCancelled, statusRunning, statusClaimed,
	statusFailed, statusPending}
