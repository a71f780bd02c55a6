package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// serverComms are the process names of the backing services whose CPU the bench reports.
var serverComms = map[string]string{"mariadbd": "mariadb", "mysqld": "mariadb", "redis-server": "redis"}

// cpuSampler measures the CPU time spent by each part of the stack during a scenario: the
// orchestrator, the workers, MariaDB, Redis and the bench itself. On a machine this small they
// all compete for the same cores, so the split says where a bottleneck is and how much the
// load generator took for itself.
type cpuSampler struct {
	st *stack
}

// cpuSample is the CPU time of one process so far.
type cpuSample struct {
	part string
	cpu  time.Duration
}

// snapshot returns the CPU time so far of every process of the stack, by pid. Processes that
// cannot be read are left out (not Linux, a process that exited).
func (c cpuSampler) snapshot() map[int]cpuSample {
	out := map[int]cpuSample{}
	add := func(part string, pid int) {
		if d, ok := procCPU(pid); ok {
			out[pid] = cpuSample{part: part, cpu: d}
		}
	}
	add("bench", os.Getpid())
	if c.st.orch != nil && !c.st.orch.exited() {
		add("orchestrator", c.st.orch.pid())
	}
	for _, w := range c.st.workers {
		if !w.exited() {
			add("workers", w.pid())
		}
	}
	if c.st.info.Mode != "embedded" { // there the orchestrator's process holds both
		for pid, part := range serverPIDs() {
			add(part, pid)
		}
	}
	return out
}

// cpuDelta returns the CPU seconds per part between two snapshots, with the share of the
// machine each used over wall (percent of all cores). A process missing from before (a worker
// started during the scenario) counts from zero; one missing from after (stopped) is left out.
func cpuDelta(before, after map[int]cpuSample, wall time.Duration, cpus int) map[string]CPUUse {
	per := map[string]time.Duration{}
	for pid, a := range after {
		per[a.part] += a.cpu - before[pid].cpu
	}
	out := map[string]CPUUse{}
	for part, d := range per {
		u := CPUUse{Seconds: seconds(d)}
		if wall > 0 && cpus > 0 {
			u.MachinePct = round3(100 * d.Seconds() / wall.Seconds() / float64(cpus))
		}
		out[part] = u
	}
	return out
}

// CPUUse is the CPU one part of the stack used during a scenario.
type CPUUse struct {
	// Seconds is user + system CPU time.
	Seconds float64 `json:"seconds"`
	// MachinePct is Seconds over the scenario's wall time and all cores, in percent.
	MachinePct float64 `json:"machine_pct"`
}

// procCPU returns user + system CPU time of pid from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces: parse after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	// After the name: state(3) ppid(4) … utime(14) stime(15), so utime is f[11].
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	stt, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+stt) * clockTick, true
}

// serverPIDs finds the MariaDB and Redis processes of this machine by their command name. They
// are only read, never signalled.
func serverPIDs() map[int]string {
	out := map[int]string{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		part, ok := serverComms[strings.TrimSpace(string(b))]
		if !ok {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			out[pid] = part
		}
	}
	return out
}
