package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gpuorch/orchestrator/admission"
	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/store"
)

// The admission scenario measures what admission control costs a submit. The orchestrator has
// no histogram of its decisions, so the cost is measured from outside, three ways: closed-loop
// single submits (POST /jobs/submit, workers stopped) under three policies of the bench's
// agent, interleaved in short slices so that the machine's other load falls on all three
// alike; the server's own time of those submits (the HTTP duration histogram of
// /jobs/submit); and the token-bucket call itself, made from the bench with the
// orchestrator's limiter code against the same Redis.
const (
	// parkedType is the job type of the admission scenario's submits in the bench's own stack:
	// a noop type that no worker serves, so that its jobs stay pending in a stream of their
	// own, never run, and never come ahead of a later scenario's jobs (drain ignores them).
	parkedType = "noop_parked"
	// admissionWarmup is how many submits open the connections before the first slice.
	admissionWarmup = 200
	// admissionSlice is the least length of one slice: -duration is cut into rounds of one
	// slice per mode, as many rounds as fit.
	admissionSlice = time.Second
	// perRequestBurst is the burst of the per_request policy: at a tenth of it an instance
	// takes one token per Redis call (admission/token_stash.go: a batch is at most a tenth of
	// the burst), and at 1,000,000/s the bucket never runs dry.
	perRequestBurst = 19
	// limiterCalls is how many token-bucket calls the bench makes itself, one after another.
	limiterCalls = 2000
)

// AdmissionMode is what the admission scenario measured under one policy of the bench's agent.
type AdmissionMode struct {
	// Name is "configured" (the policy the stack gives the bench's agent: the bench's lifted
	// default policy, whose tokens an instance takes from Redis in batches), "per_request" (a
	// policy of the agent whose every token is a Redis call) or "exempt" (the agent's policy
	// disabled: no token bucket, the baseline).
	Name string `json:"name"`
	// Policy is the agent's policy in the mode, as the API showed or stored it.
	Policy string `json:"policy"`
	// Slices is how many slices ran in the mode.
	Slices int `json:"slices"`
	// Submitted counts the accepted submits, SubmitErrors the others by code.
	Submitted    int            `json:"submitted"`
	SubmitErrors map[string]int `json:"submit_errors,omitempty"`
	// SubmitSeconds is the mode's slices together (first request to last answer of each), and
	// SubmitPerSec its rate.
	SubmitSeconds float64 `json:"submit_seconds"`
	SubmitPerSec  float64 `json:"submit_per_sec"`
	// SubmitHTTPMS is the client-side latency of POST /jobs/submit.
	SubmitHTTPMS *Percentiles `json:"submit_http_ms,omitempty"`
	// ServerMS is the orchestrator's own time of those requests (its request-duration
	// histogram of /jobs/submit over the slices).
	ServerMS *ServerLatency `json:"server_ms,omitempty"`
	// Decisions are the admission decisions counted meanwhile by "<decision>_<reason>"
	// (gpu_orchestrator_admission_decisions_total): they show that the mode applied.
	Decisions map[string]int `json:"decisions,omitempty"`
	// HTTPP50OverExemptMS and ServerMeanOverExemptMS are the mode's client-side p50 and server
	// mean less exempt's: what the token bucket adds to a submit, within the noise.
	HTTPP50OverExemptMS    *float64 `json:"http_p50_over_exempt_ms,omitempty"`
	ServerMeanOverExemptMS *float64 `json:"server_mean_over_exempt_ms,omitempty"`
}

// admissionRun is one run of the admission scenario.
type admissionRun struct {
	r    *runner
	res  *ScenarioResult
	sub  submitter
	ids  idSpace
	mode []*modeAcc
	// scrapeErr is set once GET /metrics failed; the server figures are then left out.
	scrapeErr error
	// ownPolicy is true once the bench set a policy of its agent, to be deleted at the end.
	ownPolicy bool
}

// modeAcc accumulates one mode over its slices.
type modeAcc struct {
	AdmissionMode
	short    string // in the job ids: c, r, e
	lat      []time.Duration
	busy     time.Duration
	hist     histogram
	apply    func(ctx context.Context) (policy string, err error)
	applyErr error
}

// admission runs the scenario with the workers stopped. On the bench's own stack it submits
// parkedType jobs and switches the bench agent's policy between the modes (through PUT and
// DELETE /control/admission, deleting its policy at the end); against -api-url it submits -type
// jobs under the configured policy only, changing nothing there.
func (r *runner) admission(ctx context.Context, ids idSpace) *ScenarioResult {
	res := &ScenarioResult{Window: "no job runs: the figures are admission_modes (closed-loop submits in slices of -duration, workers stopped)"}
	if r.st.canManageWorkers() {
		if err := r.st.stopWorkers(); err != nil {
			res.Notes = append(res.Notes, "stopping workers: "+err.Error())
		}
	}
	a := &admissionRun{r: r, res: res, ids: ids, sub: submitter{api: r.st.api, jobType: parkedType, payload: r.sub.payload}}
	own := r.st.owned()
	if !own {
		a.sub.jobType = r.o.jobType
		res.Notes = append(res.Notes, "-api-url: only the configured policy is measured (the bench changes no policy of a stack it does not own), with -type jobs, which that stack's workers will run")
	}
	a.mode = a.modes(own)
	defer a.restore(ctx)

	warm := newLoadStats(admissionWarmup, false)
	a.sub.closedLoop(ctx, warm, idSpace{prefix: ids.prefix + "w-"}, admissionWarmup, r.o.producers)
	res.Submitted += int(warm.accepted.Load())
	mergeCounts(&res.SubmitErrors, warm.errorCounts())

	prefix := r.st.prefix
	if prefix == "" {
		prefix = "bench" + r.runID + ":"
	}
	if lat, refused, err := limiterCallLatency(ctx, r.st.redisAddr, prefix, limiterCalls); err != nil {
		res.Notes = append(res.Notes, "token-bucket calls: "+err.Error())
	} else {
		res.LimiterCallMS = &lat
		if refused > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%d of the bench's own token-bucket calls were refused", refused))
		}
	}

	rounds, slice := sliceSchedule(r.o.duration, len(a.mode))
	progress("admission: %d rounds of %d slices of %s (%s), %d producers, workers stopped", rounds, len(a.mode),
		slice.Round(time.Millisecond), strings.Join(a.names(), ", "), r.o.producers)
	for round := range rounds {
		for j := range a.mode {
			if ctx.Err() != nil {
				break
			}
			a.slice(ctx, a.mode[(round+j)%len(a.mode)], round, slice)
		}
	}
	a.finish()
	return res
}

// modes returns the modes of the run: all three on the bench's own stack, only configured
// against -api-url.
func (a *admissionRun) modes(own bool) []*modeAcc {
	api := a.r.st.api
	configured := &modeAcc{AdmissionMode: AdmissionMode{Name: "configured"}, short: "c",
		apply: func(ctx context.Context) (string, error) {
			if a.ownPolicy {
				if err := api.DeleteAdmissionPolicy(ctx, benchAgent); err != nil && !isNotFound(err) {
					return "", err
				}
			}
			st, err := api.GetAdmission(ctx)
			if err != nil {
				// An agent token may not read it (-api-url): the mode is measured all the same.
				return "not known: " + err.Error(), nil
			}
			return describeConfigured(st, benchAgent), nil
		}}
	if !own {
		return []*modeAcc{configured}
	}
	set := func(u client.AdmissionPolicyUpdate) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			a.ownPolicy = true
			p, err := api.SetAdmissionPolicy(ctx, u)
			if err != nil {
				return "", err
			}
			return describePolicy(p, "the agent's own"), nil
		}
	}
	rate, burst, zero, on, off := float64(benchAdmissionRate), perRequestBurst, 0, true, false
	return []*modeAcc{
		configured,
		{AdmissionMode: AdmissionMode{Name: "per_request"}, short: "r", apply: set(client.AdmissionPolicyUpdate{
			Agent: benchAgent, RatePerSec: &rate, Burst: &burst, MaxPending: &zero, Enabled: &on})},
		{AdmissionMode: AdmissionMode{Name: "exempt"}, short: "e", apply: set(client.AdmissionPolicyUpdate{
			Agent: benchAgent, Enabled: &off})},
	}
}

// names returns the modes' names.
func (a *admissionRun) names() []string {
	out := make([]string, len(a.mode))
	for i, m := range a.mode {
		out[i] = m.Name
	}
	return out
}

// sliceSchedule cuts d into rounds of one slice per mode, slices of at least admissionSlice
// (one round when d is shorter).
func sliceSchedule(d time.Duration, modes int) (rounds int, slice time.Duration) {
	rounds = max(1, int(d/(time.Duration(modes)*admissionSlice)))
	return rounds, d / time.Duration(rounds*modes)
}

// slice applies m's policy and runs one slice of closed-loop submits in it, scraping the
// orchestrator's metrics before and after.
func (a *admissionRun) slice(ctx context.Context, m *modeAcc, round int, d time.Duration) {
	r := a.r
	policy, err := m.apply(ctx)
	if err != nil {
		if m.applyErr == nil && ctx.Err() == nil {
			m.applyErr = err
			a.res.Notes = append(a.res.Notes, fmt.Sprintf("%s: set the policy: %v (slice skipped)", m.Name, err))
		}
		return
	}
	m.Policy = policy
	before := a.scrape(ctx)
	capacity := max(1000, int(d.Seconds()*probeRateCap))
	ls := newLoadStats(capacity, false)
	a.sub.closedLoopUntil(ctx, ls, idSpace{prefix: fmt.Sprintf("%s%s%d-", a.ids.prefix, m.short, round)},
		capacity, r.o.producers, time.Now().Add(d))
	after := a.scrape(ctx)
	if ls.sent() >= int64(capacity) {
		a.res.Notes = append(a.res.Notes, fmt.Sprintf("a %s slice reached its cap of %d submits", m.Name, capacity))
	}
	m.Slices++
	m.Submitted += int(ls.accepted.Load())
	mergeCounts(&m.SubmitErrors, ls.errorCounts())
	m.busy += ls.end.Sub(ls.start)
	m.lat = append(m.lat, nonZero(ls.lat)...)
	if before != nil && after != nil {
		m.hist = m.hist.add(routeHistogram(after, "/jobs/submit").sub(routeHistogram(before, "/jobs/submit")))
		mergeCounts(&m.Decisions, countDeltas(decisionCounts(before), decisionCounts(after)))
	}
	a.res.Submitted += int(ls.accepted.Load())
	mergeCounts(&a.res.SubmitErrors, ls.errorCounts())
	if ls.firstErr != nil {
		progress("admission: %s: %d submit errors, the first: %v", m.Name, ls.failed.Load(), ls.firstErr)
	}
	progress("admission: %s slice %d: %d submits in %.2fs", m.Name, round+1, ls.accepted.Load(), ls.end.Sub(ls.start).Seconds())
}

// scrape reads the orchestrator's request durations and admission decisions; nil once a
// scrape failed (the server figures are then left out of every mode).
func (a *admissionRun) scrape(ctx context.Context) []sample {
	if a.scrapeErr != nil {
		return nil
	}
	s, err := scrapeSamples(ctx, a.r.hc, a.r.st.info.APIURL, metricHTTPDuration, metricDecisions)
	if err != nil {
		a.scrapeErr = err
		a.res.Notes = append(a.res.Notes, "no server-side figures: "+err.Error())
		return nil
	}
	return s
}

// finish fills the modes' figures, and their differences from exempt.
func (a *admissionRun) finish() {
	var exempt *AdmissionMode
	for _, m := range a.mode {
		m.SubmitSeconds, m.SubmitPerSec = seconds(m.busy), perSec(m.Submitted, m.busy)
		if len(m.lat) > 0 {
			p := summarize(m.lat)
			m.SubmitHTTPMS = &p
		}
		if a.scrapeErr == nil {
			m.ServerMS = serverLatency(m.hist)
		}
		if m.Name == "exempt" {
			exempt = &m.AdmissionMode
		}
	}
	for _, m := range a.mode {
		if exempt != nil && &m.AdmissionMode != exempt {
			m.HTTPP50OverExemptMS, m.ServerMeanOverExemptMS = overExempt(m.AdmissionMode, *exempt)
		}
		a.res.AdmissionModes = append(a.res.AdmissionModes, m.AdmissionMode)
	}
}

// overExempt returns m's client-side p50 and server mean less exempt's (nil when either is
// missing).
func overExempt(m, exempt AdmissionMode) (httpP50, serverMean *float64) {
	if m.SubmitHTTPMS != nil && exempt.SubmitHTTPMS != nil && m.SubmitHTTPMS.Count > 0 && exempt.SubmitHTTPMS.Count > 0 {
		d := round3(m.SubmitHTTPMS.P50 - exempt.SubmitHTTPMS.P50)
		httpP50 = &d
	}
	if m.ServerMS != nil && exempt.ServerMS != nil {
		d := round3(m.ServerMS.Mean - exempt.ServerMS.Mean)
		serverMean = &d
	}
	return httpP50, serverMean
}

// restore deletes the policy the bench gave its agent: the agent falls back to the default
// policy, as it was before the scenario.
func (a *admissionRun) restore(ctx context.Context) {
	if !a.ownPolicy {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.r.st.api.DeleteAdmissionPolicy(cctx, benchAgent); err != nil && !isNotFound(err) {
		a.res.Notes = append(a.res.Notes, "restore the default policy of agent "+benchAgent+": "+err.Error())
	}
}

// describeConfigured says which policy applies to agent in st: its own, or the default.
func describeConfigured(st client.AdmissionStatus, agent string) string {
	if !st.Enabled {
		return "admission control disabled (admission.disabled)"
	}
	for _, p := range st.Policies {
		if p.Agent == agent {
			return describePolicy(p, "the agent's own")
		}
	}
	return describePolicy(st.DefaultPolicy, "the default ("+st.DefaultSource+")")
}

// describePolicy is a policy in a few words.
func describePolicy(p client.AdmissionPolicy, whose string) string {
	if !p.Enabled {
		return whose + ": disabled (no token bucket)"
	}
	s := fmt.Sprintf("%s: %g/s, burst %d", whose, p.RatePerSec, p.Burst)
	if p.MaxPending > 0 {
		s += fmt.Sprintf(", max_pending %d", p.MaxPending)
	}
	return s
}

// limiterCallLatency makes n token-bucket calls one after another with the orchestrator's own
// limiter (admission.Limiter) on Redis at addr, under prefix, with a policy that takes one
// token per call (the per_request policy), and returns their latency and how many were
// refused. It deletes its bucket at the end.
func limiterCallLatency(ctx context.Context, addr, prefix string, n int) (Percentiles, int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }() // the measurement is done; closing only frees connections
	lim := admission.NewLimiter(rdb, prefix, time.Second, slog.New(slog.DiscardHandler))
	agent := benchAgent + "-limiter"
	pol := store.AdmissionPolicy{Agent: agent, RatePerSec: benchAdmissionRate, Burst: perRequestBurst, Enabled: true}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = lim.Reset(cctx, agent, pol)
	}()
	lat := make([]time.Duration, 0, n)
	refused := 0
	for range n {
		if ctx.Err() != nil {
			break
		}
		t0 := time.Now()
		ok, _, err := lim.Allow(ctx, agent, pol)
		d := time.Since(t0)
		if err != nil {
			return Percentiles{}, refused, fmt.Errorf("limiter call: %w", err)
		}
		if !ok {
			refused++
		}
		lat = append(lat, max(d, time.Nanosecond))
	}
	return summarize(lat), refused, nil
}

// admissionLine is the summary line of the admission scenario.
func admissionLine(res *ScenarioResult) string {
	var parts []string
	for _, m := range res.AdmissionModes {
		s := fmt.Sprintf("%s %.0f submits/s", m.Name, m.SubmitPerSec)
		if p := m.SubmitHTTPMS; p != nil {
			s += fmt.Sprintf(" (HTTP ms p50 %.2f p99 %.2f", p.P50, p.P99)
			if m.ServerMS != nil {
				s += fmt.Sprintf(", server mean %.2f", m.ServerMS.Mean)
			}
			s += ")"
		}
		parts = append(parts, s)
	}
	if p := res.LimiterCallMS; p != nil {
		parts = append(parts, fmt.Sprintf("token-bucket call ms p50 %.3f p99 %.3f", p.P50, p.P99))
	}
	if len(parts) == 0 {
		return "nothing measured"
	}
	return strings.Join(parts, "; ")
}

// isNotFound reports whether err is the API's 404: a policy already gone is what a delete wants.
func isNotFound(err error) bool {
	var apiErr *client.APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound
}
