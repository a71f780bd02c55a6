// Command bench is the load generator of GPU Orchestrator (`make bench`).
//
// By default it starts its own stack on this machine: a fresh MariaDB database
// (orch_bench_<random>, dropped at the end unless -keep), a unique Redis key prefix, generated
// API tokens, one `orchestrator serve` on a free loopback port and -workers `worker` processes
// serving the noop job type. With -api-url and -token it measures a running orchestrator
// instead. It then runs the scenarios of -scenarios, each on its own job-id namespace:
//
//	burndown   submit -n jobs with the workers stopped, start them, measure how fast the
//	           backlog is worked off
//	streaming  submit -n jobs as fast as -producers can while the workers run; jobs/s from the
//	           first submit to the last done
//	latency    offer -rate submits/s for -duration (open loop); per-job submit → handler start
//	           latency from the database
//	leases     offer -lease-rate lease grants/s for -duration (open loop, gpu and cpu leases
//	           alternating, each released at once); grant and release latency
//	admission  closed-loop submits for -duration with the workers stopped, in slices under
//	           three policies of the bench's agent (as configured, a Redis call per token, no
//	           token bucket); what admission control costs a submit
//	release    (not run by default) GPU jobs that cannot share a GPU queued on the simulated
//	           node: the time from a release to the next start on each GPU
//	schedule   (not run by default) a backlog of such jobs on two simulated nodes: placements
//	           per second, submit → start, release → next start
//	backlog    (not run by default; always last) with the workers stopped, probe the submit
//	           rate and the orchestrator's memory at an empty queue, at 10,000 pending jobs and
//	           at -backlog (filled with POST /jobs/submit_batch); its jobs are never run
//
// The results are a JSON document on stdout and in -out (by default a file in the user's cache
// directory, outside the working tree); progress goes to stderr. Every child process runs in
// its own process group and is stopped on exit, Ctrl-C included; a second Ctrl-C kills them at
// once. See cmd/bench/README.md.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// options are the flags.
type options struct {
	scenarios   []string
	n           int
	producers   int
	rate        float64
	leaseRate   float64
	duration    time.Duration
	maxInflight int
	timeout     time.Duration
	workers     int
	concurrency int
	gomaxprocs  int
	jobType     string
	payload     int
	mysqlDSN    string
	redisAddr   string
	apiURL      string
	token       string
	workerToken string
	redisPrefix string
	noWorkers   bool
	embedded    bool
	binDir      string
	keep        bool
	out         string
	pprof       string
	// backlog scenario
	backlog        int
	backlogProbe   time.Duration
	backlogTimeout time.Duration
}

// secretFlags are reported as "<redacted>" in the JSON.
var secretFlags = map[string]bool{"token": true, "worker-token": true}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		progress("%s: stopping the scenario, reporting what was measured and cleaning up (again to kill at once)", s)
		cancel()
		<-sigs
		progress("second signal: killing every child process")
		killAll()
		os.Exit(130)
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout))
}

// parseFlags parses args into options, checking them.
func parseFlags(args []string) (*options, *flag.FlagSet, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	scenarios := fs.String("scenarios", strings.Join(scenarioNames, ","), "comma-separated scenarios to run, in order: "+
		strings.Join(scenarioNames, ", ")+"; also "+strings.Join(extraScenarios, ", ")+" (not by default; backlog always runs last)")
	fs.IntVar(&o.n, "n", 20000, "jobs per burndown and streaming scenario")
	fs.IntVar(&o.producers, "producers", 16, "concurrent submitters of the closed-loop scenarios (burndown, streaming, admission) and of the backlog probes")
	fs.Float64Var(&o.rate, "rate", 1000, "latency: offered submits per second (open loop)")
	fs.Float64Var(&o.leaseRate, "lease-rate", 200, "leases: offered lease grants per second (open loop), each released at once")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "latency, leases: how long the rate is offered; admission: how long the submits last")
	fs.IntVar(&o.maxInflight, "max-inflight", 512, "latency, leases: most requests outstanding at once")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "deadline of each scenario; past it the partial figures are reported")
	fs.IntVar(&o.workers, "workers", 2, "worker processes the bench starts")
	fs.IntVar(&o.concurrency, "concurrency", 50, "jobs each worker runs at once")
	fs.IntVar(&o.gomaxprocs, "gomaxprocs", 0, "GOMAXPROCS of the orchestrator and the workers the bench starts (0: Go's default, the CPUs); see docs/performance.md")
	fs.StringVar(&o.jobType, "type", "noop", "job type to submit (its handler must be noop)")
	fs.IntVar(&o.payload, "payload-bytes", 0, fmt.Sprintf("size of every job's payload: {} when 0, else a JSON object of exactly this many bytes (%d to %d, the orchestrator's default max_payload_bytes); not with backlog, whose batches would pass the 32 MiB request cap", minPayloadBytes, maxPayloadBytes))
	fs.StringVar(&o.mysqlDSN, "mysql-dsn", cmp.Or(os.Getenv("ORCH_TEST_MYSQL_DSN"), "root@tcp(127.0.0.1:3306)/"),
		"MariaDB: the server for the bench's own database; with -api-url, the orchestrator's database (…/orchestrator)")
	fs.StringVar(&o.redisAddr, "redis-addr", cmp.Or(os.Getenv("ORCH_TEST_REDIS_ADDR"), "127.0.0.1:6379"), "Redis address")
	fs.StringVar(&o.apiURL, "api-url", "", "measure the orchestrator at this URL instead of starting one")
	fs.StringVar(&o.token, "token", os.Getenv("ORCH_API_TOKEN"), "with -api-url: an admin (or agent \"bench\") token")
	fs.StringVar(&o.workerToken, "worker-token", "", "with -api-url: the token of the workers the bench starts (default -token)")
	fs.StringVar(&o.redisPrefix, "redis-prefix", os.Getenv("ORCH_REDIS_PREFIX"), "with -api-url: the orchestrator's Redis key prefix, for the bench's workers")
	fs.BoolVar(&o.noWorkers, "no-workers", false, "start no workers (the stack has its own); burndown then cannot stop them")
	fs.BoolVar(&o.embedded, "embedded", false, "run the bench's orchestrator in the embedded mode (orchestrator serve --embedded: SQLite in a temporary data directory, Redis in its process) instead of on MariaDB and Redis")
	fs.StringVar(&o.binDir, "bin", "bin", "directory of the orchestrator and worker binaries (built into a temporary directory when missing)")
	fs.BoolVar(&o.keep, "keep", false, "keep the database, the Redis keys and the logs")
	fs.StringVar(&o.out, "out", "", "also write the JSON report to this file (default: gpu-orchestrator/bench/results-<start>.json in $XDG_CACHE_HOME, else ~/.cache, else the temporary directory)")
	fs.StringVar(&o.pprof, "pprof", "", "record the orchestrator's CPU with perf during this scenario (own stack only); report next to -out")
	fs.IntVar(&o.backlog, "backlog", 1000000, fmt.Sprintf("backlog: pending jobs of the last probe (above %d, the second probe's)", backlogBase))
	fs.DurationVar(&o.backlogProbe, "backlog-probe", 5*time.Second, "backlog: how long each submit-rate probe lasts")
	fs.DurationVar(&o.backlogTimeout, "backlog-timeout", 30*time.Minute, "backlog: deadline of the scenario (instead of -timeout)")
	if err := fs.Parse(args); err != nil {
		return nil, fs, err
	}
	if fs.NArg() > 0 {
		return nil, fs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	o.workerToken = cmp.Or(o.workerToken, o.token)
	var errs []error
	for _, s := range strings.Split(*scenarios, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(scenarioNames, s) && !slices.Contains(extraScenarios, s) {
			errs = append(errs, fmt.Errorf("-scenarios: unknown scenario %q (want %s)", s,
				strings.Join(slices.Concat(scenarioNames, extraScenarios), ", ")))
		}
		o.scenarios = append(o.scenarios, s)
	}
	o.scenarios = lastScenario(o.scenarios, "backlog")
	if len(o.scenarios) == 0 {
		errs = append(errs, errors.New("-scenarios: none given"))
	}
	if o.pprof != "" && !slices.Contains(o.scenarios, o.pprof) {
		errs = append(errs, fmt.Errorf("-pprof %q: not among -scenarios", o.pprof))
	}
	if o.gomaxprocs < 0 {
		errs = append(errs, errors.New("-gomaxprocs must not be negative"))
	}
	if o.n < 1 || o.producers < 1 || o.maxInflight < 1 || o.concurrency < 1 {
		errs = append(errs, errors.New("-n, -producers, -max-inflight and -concurrency must be positive"))
	}
	if o.payload != 0 && (o.payload < minPayloadBytes || o.payload > maxPayloadBytes) {
		errs = append(errs, fmt.Errorf("-payload-bytes %d: want 0 or %d to %d", o.payload, minPayloadBytes, maxPayloadBytes))
	}
	if o.payload != 0 && slices.Contains(o.scenarios, "backlog") {
		errs = append(errs, errors.New("-payload-bytes: not with the backlog scenario, whose fill sends 1,000 jobs a request"))
	}
	if o.workers < 1 && !o.noWorkers {
		errs = append(errs, errors.New("-workers must be positive (or use -no-workers)"))
	}
	if o.rate <= 0 || o.leaseRate <= 0 || o.duration <= 0 || o.timeout <= 0 {
		errs = append(errs, errors.New("-rate, -lease-rate, -duration and -timeout must be positive"))
	}
	if o.jobType == parkedType {
		errs = append(errs, fmt.Errorf("-type %s: the name of the bench's type that no worker serves (admission)", parkedType))
	}
	if o.backlog <= backlogBase {
		errs = append(errs, fmt.Errorf("-backlog must be above %d (the backlog of the second probe)", backlogBase))
	}
	if o.backlogProbe <= 0 || o.backlogTimeout <= 0 {
		errs = append(errs, errors.New("-backlog-probe and -backlog-timeout must be positive"))
	}
	if o.apiURL != "" && o.token == "" {
		errs = append(errs, errors.New("-api-url needs -token (or ORCH_API_TOKEN)"))
	}
	if o.apiURL == "" && o.noWorkers {
		errs = append(errs, errors.New("-no-workers only makes sense with -api-url"))
	}
	if o.embedded && o.apiURL != "" {
		errs = append(errs, errors.New("-embedded starts an orchestrator of its own: not with -api-url"))
	}
	if o.embedded && slices.Contains(o.scenarios, "backlog") {
		errs = append(errs, errors.New("-embedded: not with the backlog scenario (the embedded Redis keeps a stream as a plain slice: a million entries are beyond it; see internal/embedredis)"))
	}
	return o, fs, errors.Join(errs...)
}

// lastScenario moves every name of names to the end, keeping the others in order. The backlog
// scenario leaves a backlog that is never run: a scenario after it would find those jobs
// ahead of its own in the stream, and wait for them.
func lastScenario(names []string, name string) []string {
	out := make([]string, 0, len(names))
	var last []string
	for _, n := range names {
		if n == name {
			last = append(last, n)
		} else {
			out = append(out, n)
		}
	}
	return append(out, last...)
}

// run runs the bench and returns the exit status: 0 when every scenario completed, 1 when one
// failed or timed out (the report is still written), 2 on bad flags.
func run(ctx context.Context, args []string, stdout io.Writer) int {
	o, fs, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	rep := &Report{
		StartedAt: time.Now().UTC(),
		Machine:   machineInfo(),
		Command:   strings.Join(append([]string{"bench"}, args...), " "),
		Config:    flagValues(fs),
		Scenarios: map[string]*ScenarioResult{},
	}
	o.out = reportPath(o.out, rep.StartedAt)
	progress("bench: %d CPUs, load average %s; scenarios %s; report to %s", rep.Machine.CPUs, rep.Machine.LoadAvg, strings.Join(o.scenarios, ","), o.out)
	status := 0
	if err := runScenarios(ctx, o, rep); err != nil {
		rep.Error = err.Error()
		progress("bench: %v", err)
		status = 1
	}
	for _, res := range rep.Scenarios {
		if res.TimedOut || res.Error != "" {
			status = 1
		}
	}
	rep.FinishedAt, rep.LoadAvgEnd = time.Now().UTC(), loadAvg()
	if err := writeReport(rep, stdout, o.out); err != nil {
		progress("bench: %v", err)
		return 1
	}
	progress("bench: report written to %s", o.out)
	return status
}

// runScenarios sets the stack up, runs the scenarios into rep and tears the stack down.
func runScenarios(ctx context.Context, o *options, rep *Report) error {
	hc := newHTTPClient(max(o.producers, 64))
	st, err := newStack(ctx, o, hc)
	if err != nil {
		return fmt.Errorf("set up stack: %w", err)
	}
	defer st.close()
	rep.Stack = st.info
	r := &runner{
		o:     o,
		st:    st,
		hc:    hc,
		sub:   submitter{api: st.api, jobType: o.jobType, payload: benchPayload(o.payload)},
		jdb:   jobsDB{db: st.db, jobType: o.jobType, sqlite: st.sqlitePath != "", noHint: new(atomic.Bool)},
		runID: randomHex(3),
	}
	for _, name := range o.scenarios {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted before %s", name)
		}
		if err := st.check(); err != nil {
			return fmt.Errorf("stack broken before %s: %w", name, err)
		}
		progress("== %s", name)
		res := r.run(ctx, name)
		rep.Scenarios[name] = res
		rep.Order = append(rep.Order, name)
		progress("== %s: %s", name, summaryLine(name, res))
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return nil
}

// summaryLine is the one-line result of a scenario.
func summaryLine(name string, res *ScenarioResult) string {
	switch name {
	case "backlog":
		return backlogLine(res)
	case "leases":
		return leasesLine(res)
	case "release":
		return releaseLine(res)
	case "schedule":
		return scheduleLine(res)
	case "admission":
		return admissionLine(res)
	}
	return fmt.Sprintf("%d jobs in %.2fs = %.0f jobs/s; submit %.0f/s%s", res.Jobs, res.Seconds,
		res.JobsPerSec, res.SubmitPerSec, latencyLine(res))
}

// latencyLine is the latency part of a scenario's summary line.
func latencyLine(res *ScenarioResult) string {
	if res.LatencyMS == nil || res.LatencyMS.Count == 0 {
		return ""
	}
	l := res.LatencyMS
	return fmt.Sprintf("; submit→start ms p50 %.1f p90 %.1f p99 %.1f max %.1f", l.P50, l.P90, l.P99, l.Max)
}

// flagValues returns every flag's value for the report, secrets redacted.
func flagValues(fs *flag.FlagSet) map[string]any {
	out := map[string]any{}
	fs.VisitAll(func(f *flag.Flag) {
		var v any = f.Value.String()
		if g, ok := f.Value.(flag.Getter); ok {
			switch typed := g.Get().(type) {
			case int, float64, bool:
				v = typed
			}
		}
		switch s := f.Value.String(); {
		case secretFlags[f.Name] && s != "":
			v = "<redacted>"
		case f.Name == "mysql-dsn":
			if cfg, err := mysql.ParseDSN(s); err == nil && cfg.Passwd != "" {
				cfg.Passwd = "redacted"
				v = cfg.FormatDSN()
			}
		}
		out[f.Name] = v
	})
	return out
}

// progress prints a timestamped line on stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
