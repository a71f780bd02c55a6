package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
)

// The leases scenario measures lease grants and releases over the API (POST /leases, POST
// /leases/{token}/release) as an agent takes them: open loop at -lease-rate for -duration,
// each grant released as soon as it is answered, gpu and cpu leases alternating.
const (
	// benchSimGPUs are the simulated GPUs of the orchestrator's node in the bench's own stack
	// (ORCH_SIM_GPUS): two of 24 GiB.
	benchSimGPUs = "2x24576"
	// benchSimGPUCount is how many GPUs benchSimGPUs has.
	benchSimGPUCount = 2
	// leaseMemoryMB is the memory of each gpu lease: 23 fit on one simulated GPU beside the
	// safety margin, many more than are in flight at -lease-rate 200, so that a grant measures
	// the placement, not a full node.
	leaseMemoryMB = 1024
	// leaseWarmup is how many grants and releases (of each mode) open the connections before
	// the measured run; the first also checks that the mode works.
	leaseWarmup = 10
	// gpuWait bounds the wait for the first telemetry of the orchestrator's node, which it
	// reports every telemetry.poll_interval (5 s), after a random stagger.
	gpuWait = 15 * time.Second
	// gpuSampleInterval is how often GET /gpus is read during the run, to check that no GPU is
	// reserved beyond its memory.
	gpuSampleInterval = 200 * time.Millisecond
	// releaseTimeout bounds a release, which is sent even after the scenario's deadline or a
	// Ctrl-C, so that no lease is left to expire.
	releaseTimeout = 10 * time.Second
)

// LeaseMode is what the leases scenario measured of one lease mode.
type LeaseMode struct {
	// Mode is "gpu" or "cpu"; MemoryMB is what each lease asked for.
	Mode     string `json:"mode"`
	MemoryMB int64  `json:"memory_mb"`
	// Offered counts the grant requests sent, Granted the leases granted and Released those
	// released; GrantErrors and ReleaseErrors count the failures by "<status>_<code>" (a
	// denial is a 409 whose code is its reason: no_capacity, node_unknown, telemetry_stale).
	Offered       int            `json:"offered"`
	Granted       int            `json:"granted"`
	Released      int            `json:"released"`
	GrantErrors   map[string]int `json:"grant_errors,omitempty"`
	ReleaseErrors map[string]int `json:"release_errors,omitempty"`
	// GrantsPerSec is Granted over the run (the first request to the last answer).
	GrantsPerSec float64 `json:"grants_per_sec"`
	// GrantMS is the client-side latency of a granted POST /leases, ReleaseMS that of an
	// answered POST /leases/{token}/release.
	GrantMS   *Percentiles `json:"grant_ms,omitempty"`
	ReleaseMS *Percentiles `json:"release_ms,omitempty"`
}

// LeaseGPUCheck is what GET /gpus showed of the node of the gpu leases during the run (sampled
// every gpuSampleInterval) and once every release was answered.
type LeaseGPUCheck struct {
	NodeID  string     `json:"node_id"`
	Samples int        `json:"samples"`
	GPUs    []LeaseGPU `json:"gpus"`
	// OverCommitted is true when a sample showed a GPU whose leases reserved more than its
	// grantable memory. Samples can miss a short excess: false is evidence, not proof.
	OverCommitted bool `json:"over_committed"`
}

// LeaseGPU is one GPU of a LeaseGPUCheck.
type LeaseGPU struct {
	Index   int   `json:"gpu_index"`
	TotalMB int64 `json:"memory_total_mb"`
	// GrantableMB is the most the GPU's leases may reserve: its memory less the safety margin
	// (the default margin, which the bench's own stack keeps; with -api-url the margin is not
	// known and this is the whole memory).
	GrantableMB int64 `json:"grantable_mb"`
	// MaxReservedMB and MaxActiveLeases are the highest of the samples.
	MaxReservedMB   int64 `json:"max_reserved_mb"`
	MaxActiveLeases int   `json:"max_active_leases"`
	// ReservedAfterMB and ActiveLeasesAfter were read after the last release: 0 unless a
	// release failed or another client holds leases there.
	ReservedAfterMB   int64 `json:"reserved_after_mb"`
	ActiveLeasesAfter int   `json:"active_leases_after"`
}

// leaseStats is what one mode's requests recorded, indexed by event (the mode's events only).
type leaseStats struct {
	req     client.LeaseRequest
	offered atomic.Int64
	grant   *loadStats
	release *loadStats
}

// leaseRun is one run of the leases scenario.
type leaseRun struct {
	r     *runner
	res   *ScenarioResult
	modes []*leaseStats
	// gpus is the check of the gpu leases' node; nil without gpu leases.
	gpus   *LeaseGPUCheck
	margin int64 // the safety margin of GrantableMB
}

// leaseRequest is the request of one lease of mode for the bench's agent.
func leaseRequest(mode string) client.LeaseRequest {
	req := client.LeaseRequest{Agent: benchAgent, Mode: mode}
	if mode == client.LeaseModeGPU {
		req.MinMemoryMB = leaseMemoryMB
	}
	return req
}

// leases runs the scenario: gpu and cpu leases alternate (cpu only when gpu leases cannot be
// granted here), each released as soon as it is granted; the workers are stopped, having no
// part in it.
func (r *runner) leases(ctx context.Context) *ScenarioResult {
	res := &ScenarioResult{TargetRate: r.o.leaseRate,
		Window: "no jobs: lease grants and releases; seconds = first grant sent → last answer (bench clock)"}
	if r.st.canManageWorkers() {
		if err := r.st.stopWorkers(); err != nil {
			res.Notes = append(res.Notes, "stopping workers: "+err.Error())
		}
	}
	lr := &leaseRun{r: r, res: res}
	if r.st.owned() {
		lr.margin = config.LeaseSafetyMarginMBDefault
	} else {
		res.Notes = append(res.Notes, "-api-url: the GPUs' safety margin is not known; grantable_mb is their whole memory")
	}
	lr.setUp(ctx)
	if len(lr.modes) == 0 {
		res.Error = "no lease mode could be granted (see notes)"
		return res
	}
	before, scrapeErr := scrapeSamples(ctx, r.hc, r.st.info.APIURL, metricHTTPDuration)

	total := pacerTotal(r.o.leaseRate, r.o.duration)
	for _, m := range lr.modes {
		m.grant, m.release = newLoadStats(total, false), newLoadStats(total, false)
	}
	names := make([]string, len(lr.modes))
	for i, m := range lr.modes {
		names[i] = m.req.Mode
	}
	progress("leases: offering %.0f grants/s for %s (%d leases, open loop, %s alternating, each released at once)",
		r.o.leaseRate, r.o.duration, total, strings.Join(names, " and "))
	stopSampler := lr.sampleGPUs(ctx)
	var granted atomic.Int64
	stop := ticker(time.Second, func() { progress("leases: granted %d/%d", granted.Load(), total) })
	lag := make([]time.Duration, total)
	start, end := paced(ctx, total, r.o.leaseRate, r.o.maxInflight, lag, func(i int) {
		m := lr.modes[i%len(lr.modes)]
		if lr.grantAndRelease(ctx, m, i) {
			granted.Add(1)
		}
	})
	stop()
	stopSampler()
	lr.checkAfter(ctx)

	res.Seconds = seconds(end.Sub(start))
	l := summarize(nonZero(lag))
	res.SendLagMS = &l
	for _, m := range lr.modes {
		res.LeaseModes = append(res.LeaseModes, m.result(end.Sub(start)))
		for _, ls := range []*loadStats{m.grant, m.release} {
			if ls.firstErr != nil {
				progress("leases: %s: %d errors %v, the first: %v", m.req.Mode, ls.failed.Load(), ls.errorCounts(), ls.firstErr)
			}
		}
	}
	res.LeaseGPUs = lr.gpus
	if scrapeErr == nil {
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), measureTimeout)
		defer cancel()
		after, err := scrapeSamples(mctx, r.hc, r.st.info.APIURL, metricHTTPDuration)
		scrapeErr = err
		res.ServerMS = routeLatencies(before, after, map[string]string{"grant": "/leases", "release": "/leases/:token/release"})
	}
	if scrapeErr != nil {
		res.Notes = append(res.Notes, "no server-side figures: "+scrapeErr.Error())
	}
	return res
}

// setUp picks the modes: for gpu leases it waits (own stack) until the orchestrator's node
// reports its GPUs, then grants and releases leaseWarmup leases of each mode; a mode whose
// first grant fails is left out, with a note.
func (lr *leaseRun) setUp(ctx context.Context) {
	r := lr.r
	if node := r.st.info.GPUNode; node != "" {
		if err := r.st.waitGPUs(ctx, node); err != nil {
			lr.res.Notes = append(lr.res.Notes, err.Error())
		}
	}
	for _, mode := range []string{client.LeaseModeGPU, client.LeaseModeCPU} {
		m := &leaseStats{req: leaseRequest(mode)}
		g, err := lr.probe(ctx, m.req)
		if err != nil {
			lr.res.Notes = append(lr.res.Notes, fmt.Sprintf("%s leases left out: %v", mode, err))
			continue
		}
		if mode == client.LeaseModeGPU {
			lr.gpus = &LeaseGPUCheck{NodeID: g.NodeID}
		}
		lr.modes = append(lr.modes, m)
	}
}

// probe grants and releases leaseWarmup leases of req in a row and returns the first grant.
func (lr *leaseRun) probe(ctx context.Context, req client.LeaseRequest) (client.LeaseGrant, error) {
	api := lr.r.st.api
	var first client.LeaseGrant
	for i := range leaseWarmup {
		g, err := api.GrantLease(ctx, req)
		if err != nil {
			return first, err
		}
		if i == 0 {
			first = g
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_, err = api.ReleaseLease(rctx, g.Token)
		cancel()
		if err != nil {
			return first, err
		}
	}
	return first, nil
}

// grantAndRelease takes one lease of m for event i and releases it at once, recording both.
// It reports whether the lease was granted.
func (lr *leaseRun) grantAndRelease(ctx context.Context, m *leaseStats, i int) bool {
	api := lr.r.st.api
	m.offered.Add(1)
	t0 := time.Now()
	g, err := api.GrantLease(ctx, m.req)
	if err != nil {
		m.grant.fail(err)
		return false
	}
	m.grant.lat[i] = max(time.Since(t0), time.Nanosecond)
	m.grant.accepted.Add(1)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	t1 := time.Now()
	if _, err := api.ReleaseLease(rctx, g.Token); err != nil {
		m.release.fail(err)
		return true
	}
	m.release.lat[i] = max(time.Since(t1), time.Nanosecond)
	m.release.accepted.Add(1)
	return true
}

// result is the mode's figures over a run of d.
func (m *leaseStats) result(d time.Duration) LeaseMode {
	out := LeaseMode{
		Mode: m.req.Mode, MemoryMB: m.req.MinMemoryMB, Offered: int(m.offered.Load()),
		Granted: int(m.grant.accepted.Load()), Released: int(m.release.accepted.Load()),
		GrantErrors: m.grant.errorCounts(), ReleaseErrors: m.release.errorCounts(),
	}
	out.GrantsPerSec = perSec(out.Granted, d)
	if out.Granted > 0 {
		g, r := summarize(nonZero(m.grant.lat)), summarize(nonZero(m.release.lat))
		out.GrantMS, out.ReleaseMS = &g, &r
	}
	return out
}

// sampleGPUs reads GET /gpus of the gpu leases' node every gpuSampleInterval until the
// returned stop is called, recording the highest reservations.
func (lr *leaseRun) sampleGPUs(ctx context.Context) (stop func()) {
	if lr.gpus == nil {
		return func() {}
	}
	var mu sync.Mutex
	var firstErr error
	stopTicker := ticker(gpuSampleInterval, func() {
		gl, err := lr.r.st.api.ListGPUs(ctx, lr.gpus.NodeID)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if firstErr == nil && ctx.Err() == nil {
				firstErr = err
			}
			return
		}
		lr.gpus.Samples++
		lr.gpus.record(gl.GPUs, lr.margin, false)
	})
	return func() {
		stopTicker()
		if firstErr != nil {
			lr.res.Notes = append(lr.res.Notes, "GET /gpus during the run: "+firstErr.Error())
		}
	}
}

// checkAfter reads the GPUs once every release has been answered.
func (lr *leaseRun) checkAfter(ctx context.Context) {
	if lr.gpus == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	gl, err := lr.r.st.api.ListGPUs(cctx, lr.gpus.NodeID)
	if err != nil {
		lr.res.Notes = append(lr.res.Notes, "GET /gpus after the run: "+err.Error())
		return
	}
	lr.gpus.record(gl.GPUs, lr.margin, true)
	for _, g := range lr.gpus.GPUs {
		if g.ActiveLeasesAfter > 0 {
			lr.res.Notes = append(lr.res.Notes, fmt.Sprintf("GPU %d still had %d active leases (%d MB) after the last release",
				g.Index, g.ActiveLeasesAfter, g.ReservedAfterMB))
		}
	}
}

// record adds one GET /gpus answer to the check: the highest reservation of each GPU during
// the run, or (after) what is left once the run is over.
func (c *LeaseGPUCheck) record(gpus []client.GPU, margin int64, after bool) {
	for _, g := range gpus {
		if g.Lost {
			continue
		}
		i := c.gpu(g, margin)
		if after {
			i.ReservedAfterMB, i.ActiveLeasesAfter = g.MemoryReservedMB, g.ActiveLeases
			continue
		}
		i.MaxReservedMB = max(i.MaxReservedMB, g.MemoryReservedMB)
		i.MaxActiveLeases = max(i.MaxActiveLeases, g.ActiveLeases)
		if g.MemoryReservedMB > i.GrantableMB {
			c.OverCommitted = true
		}
	}
}

// gpu returns the entry of g, adding it when new.
func (c *LeaseGPUCheck) gpu(g client.GPU, margin int64) *LeaseGPU {
	for i := range c.GPUs {
		if c.GPUs[i].Index == g.Index {
			return &c.GPUs[i]
		}
	}
	c.GPUs = append(c.GPUs, LeaseGPU{Index: g.Index, TotalMB: g.MemoryTotalMB, GrantableMB: g.MemoryTotalMB - margin})
	return &c.GPUs[len(c.GPUs)-1]
}

// leasesLine is the summary line of the leases scenario.
func leasesLine(res *ScenarioResult) string {
	var parts []string
	for _, m := range res.LeaseModes {
		s := fmt.Sprintf("%s %d/%d granted (%.0f/s)", m.Mode, m.Granted, m.Offered, m.GrantsPerSec)
		if m.GrantMS != nil && m.ReleaseMS != nil {
			s += fmt.Sprintf(", grant ms p50 %.1f p99 %.1f, release ms p50 %.1f p99 %.1f",
				m.GrantMS.P50, m.GrantMS.P99, m.ReleaseMS.P50, m.ReleaseMS.P99)
		}
		parts = append(parts, s)
	}
	if c := res.LeaseGPUs; c != nil {
		parts = append(parts, fmt.Sprintf("over-committed: %t (%d samples of GET /gpus)", c.OverCommitted, c.Samples))
	}
	if len(parts) == 0 {
		return "no lease granted"
	}
	return strings.Join(parts, "; ")
}
