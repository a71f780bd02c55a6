package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/internal/testenv"
)

// admissionTypes adds a GPU type whose queue of 3 overflows into a CPU type whose queue
// holds 2, and shortens the GPU gate's hold so that the tests see it reopen.
const admissionTypes = `  gpu_infer:
    handler: noop
    gpu_memory_mb: 1000
    queue_limit: 3
    cpu_fallback: cpu_infer
  cpu_infer:
    handler: noop
    queue_limit: 2
`

// admissionSection also lengthens the token-bucket call's deadline: on a loaded CI machine a
// call past the default 1 s falls open for CPU types (limiter_down_cpu), which the flood would
// count as over-admission; the flood measures the bucket, not an outage.
const admissionSection = `
admission:
  gpu_hold: 1s
  limiter_timeout: 10s
`

// admissionPair is a cluster with two orchestrator instances on one database and one Redis
// prefix, and a client of each.
type admissionPair struct {
	*cluster
	a, b  *client.Client
	addrB string
}

func newAdmissionPair(t *testing.T) *admissionPair {
	t.Helper()
	c := newCluster(t, "")
	cfg := strings.Replace(baseConfig, "job_types:\n", "job_types:\n"+admissionTypes, 1) + admissionSection
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, "config.yaml"), []byte(cfg), 0o600))
	c.startOrchestrator("orch-a")
	addrB := freeAddr(t)
	c.start("orch-b", "orchestrator", []string{"ORCH_HTTP_ADDR=" + addrB}, "serve")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}
	p := &admissionPair{cluster: c, addrB: addrB,
		a: client.New("http://"+c.addr, c.adminToken, client.WithHTTPClient(hc)),
		b: client.New("http://"+addrB, c.adminToken, client.WithHTTPClient(hc)),
	}
	require.Eventually(t, func() bool {
		h, err := p.b.Readyz(context.Background())
		return err == nil && h.Status == "ok"
	}, 60*time.Second, 50*time.Millisecond, "orch-b never became ready")
	return p
}

// policyApplyWait bounds how long setPolicy waits for both instances to apply a policy. The
// promise is one refresh (about a second); the wait is generous, as a loaded machine may
// delay the refresher's timer and the status calls, and a wait past the promise is logged
// with how long it took.
const policyApplyWait = 30 * time.Second

// setPolicy writes a policy through api and waits until both instances apply it.
func (p *admissionPair) setPolicy(t *testing.T, api *client.Client, u client.AdmissionPolicyUpdate) {
	t.Helper()
	want, err := api.SetAdmissionPolicy(context.Background(), u)
	require.NoError(t, err)
	start := time.Now()
	defer func() {
		if took := time.Since(start); took > 2*time.Second {
			t.Logf("policy of %s applied by both instances only %s after the change (a slow machine?)",
				u.Agent, took.Round(time.Millisecond))
		}
	}()
	for _, c := range []*client.Client{p.a, p.b} {
		require.Eventually(t, func() bool {
			st, err := c.GetAdmission(context.Background())
			if err != nil {
				return false
			}
			for _, got := range st.Policies {
				if got.Agent == want.Agent && got.UpdatedAt != nil && got.UpdatedAt.Equal(*want.UpdatedAt) {
					return true
				}
			}
			return false
		}, policyApplyWait, 10*time.Millisecond, "policy of %s not applied by both instances within %s", u.Agent, policyApplyWait)
	}
}

func submitTo(api *client.Client, id, typ, agent string) (client.SubmitResponse, error) {
	return api.Submit(context.Background(), client.SubmitRequest{JobID: id, Type: typ, Agent: agent, Payload: []byte(`{}`)})
}

// requireCode asserts that err is the API error status/code and returns its Retry-After.
func requireCode(t *testing.T, err error, status int, code string) (retryAfter time.Duration) {
	t.Helper()
	var apiErr *client.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, status, apiErr.StatusCode, "%v", err)
	require.Equal(t, code, apiErr.Code, "%v", err)
	return apiErr.RetryAfter
}

// TestAdmission runs the admission scenarios on one pair of instances, one after the other
// (each pair holds up to a hundred MariaDB connections; the subtests use their own agents).
func TestAdmission(t *testing.T) {
	t.Parallel()
	p := newAdmissionPair(t)
	t.Run("Flood", func(t *testing.T) { testAdmissionFlood(t, p) })
	t.Run("PolicyChangeOnBothInstances", func(t *testing.T) { testAdmissionPolicyChange(t, p) })
	t.Run("FallbackUnderAFullQueue", func(t *testing.T) { testAdmissionFallback(t, p) })
	t.Run("GPUPressureHysteresis", func(t *testing.T) { testAdmissionGPUPressure(t, p) })
}

// testAdmissionFlood offers one agent ten times its rate for 10 s through two instances: the
// shared bucket admits at most rate × time + burst of it, the rest is refused with a
// Retry-After, and another agent submitting meanwhile is not affected.
//
// It runs beside spinning goroutines (testenv.Busy) on every run: its assertions are what the
// limiter promises whatever the machine's speed, which a loaded machine must not break. How
// long the flood took to reach the limiter is logged, never asserted.
func testAdmissionFlood(t *testing.T, p *admissionPair) {
	const (
		rate     = 20.0
		burst    = 20
		offered  = 10 * rate // per second
		duration = 10 * time.Second
	)
	p.setPolicy(t, p.a, client.AdmissionPolicyUpdate{Agent: "flood", RatePerSec: ptr(rate), Burst: ptr(burst)})
	// The calm agent sends 5 per second, half its rate, 50 requests in all; its burst holds
	// all of them, so requests bunched by a loaded machine are admitted too. Sharing the
	// flood's bucket (empty all along) would refuse them.
	p.setPolicy(t, p.b, client.AdmissionPolicyUpdate{Agent: "calm", RatePerSec: ptr(10.0), Burst: ptr(50)})
	testenv.Busy(t, 0)

	var (
		wg                 sync.WaitGroup
		admitted, limited  atomic.Int64
		calmOK             atomic.Int64
		errMu              sync.Mutex
		unexpected         []error
		first, last        time.Time
		lastAnswer         time.Time // of any flood request
		lastRefusedSent    time.Time // when the last request refused was sent
		maxLatency         time.Duration
		minRetry, maxRetry = time.Hour, time.Duration(0)
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		unexpected = append(unexpected, err)
	}
	// send submits request i of the flood (alternating instances) and, every fifth of a
	// second, one of the calm agent, each on its own goroutine.
	send := func(i int) {
		api := p.a
		if i%2 == 1 {
			api = p.b
		}
		wg.Go(func() {
			sent := time.Now()
			_, err := submitTo(api, fmt.Sprintf("flood-%05d", i), "noop", "flood")
			answered := time.Now()
			errMu.Lock()
			maxLatency = max(maxLatency, answered.Sub(sent))
			if answered.After(lastAnswer) {
				lastAnswer = answered
			}
			errMu.Unlock()
			var apiErr *client.APIError
			switch {
			case err == nil:
				admitted.Add(1)
			case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests && apiErr.Code == client.CodeRateLimited:
				limited.Add(1)
				errMu.Lock()
				minRetry, maxRetry = min(minRetry, apiErr.RetryAfter), max(maxRetry, apiErr.RetryAfter)
				if sent.After(lastRefusedSent) {
					lastRefusedSent = sent
				}
				errMu.Unlock()
			default:
				fail(err)
			}
		})
		if i%int(offered/5) == 0 { // the calm agent: 5 per second, within its rate
			wg.Go(func() {
				if _, err := submitTo(api, fmt.Sprintf("calm-%05d", i), "noop", "calm"); err != nil {
					fail(fmt.Errorf("calm agent: %w", err))
					return
				}
				calmOK.Add(1)
			})
		}
	}
	// Open loop: request i is due at first + i/offered, whatever happened to the earlier ones.
	// The ticker paces the sending; a tick the runtime delivered late sends every request due
	// by then, so the offered rate holds on a loaded machine.
	n := int(offered * duration.Seconds())
	interval := time.Duration(float64(time.Second) / offered)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	first = time.Now()
	for i := 0; i < n; {
		if i > 0 {
			<-tick.C
		}
		for due := min(n, int(time.Since(first)/interval)+1); i < due; i++ {
			last = time.Now()
			send(i)
		}
	}
	wg.Wait()

	require.Empty(t, unexpected)
	// What the bucket promises is a bound over the time its decisions span: at most
	// rate × span + burst admitted (plus the token that may be due at the edge). Every decision
	// was made between the first request's sending and the last answer's arrival, so that
	// window is a span no shorter than the limiter's, however slowly the machine delivered the
	// requests (on a loaded machine they reach the limiter spread over more than the 10 s they
	// were sent in). The admitted jobs' created_at (the server's clock, right after each
	// decision) show the span at the server, for the log.
	var firstAt, lastAt time.Time
	require.NoError(t, p.db.QueryRow(`SELECT MIN(created_at), MAX(created_at) FROM orchestrator_jobs WHERE agent = 'flood'`).Scan(&firstAt, &lastAt))
	serverSpan, window := lastAt.Sub(firstAt), lastAnswer.Sub(first)
	most := rate*window.Seconds() + burst + 1
	t.Logf("flood: offered %d, sent over %s (client, asked %s), decided within %s (first send to last answer), "+
		"admitted over %s (server); admitted %d (at most %.0f; rate × server span + burst %.0f), rate_limited %d, "+
		"Retry-After %s..%s, slowest answer %s; calm agent admitted %d",
		n, last.Sub(first).Round(time.Millisecond), duration, window.Round(time.Millisecond), serverSpan.Round(time.Millisecond),
		admitted.Load(), most, rate*serverSpan.Seconds()+burst, limited.Load(), minRetry, maxRetry,
		maxLatency.Round(time.Millisecond), calmOK.Load())
	require.LessOrEqual(t, float64(admitted.Load()), most,
		"over-admission: %d admitted in a window of %s at %v/s with a burst of %d", admitted.Load(), window, rate, burst)
	// The bucket refuses only when it is empty. The last refusal was decided after its request
	// was sent, the first decision before the first answer (at most the slowest answer's time
	// after the first sending); a bucket kept empty in between admitted a token every 1/rate
	// of that time. Half of it is asked, room for pauses of a loaded machine in which the
	// bucket filled up again, which a limiter admitting well below its rate still fails. A
	// slow machine shortens the time (the slowest answer is taken off), never lengthens it.
	saturated := lastRefusedSent.Sub(first) - maxLatency
	least := max(float64(burst), 0.5*rate*saturated.Seconds())
	require.GreaterOrEqual(t, float64(admitted.Load()), least,
		"under-admission: %d admitted though refusals went on for %s (sent; slowest answer %s)", admitted.Load(),
		lastRefusedSent.Sub(first).Round(time.Millisecond), maxLatency.Round(time.Millisecond))
	require.Positive(t, limited.Load(), "ten times the rate: most requests are refused")
	require.EqualValues(t, n, admitted.Load()+limited.Load())
	require.Equal(t, time.Second, minRetry, "a token every 50 ms: Retry-After rounds up to 1 s")
	require.Equal(t, time.Second, maxRetry)
	require.EqualValues(t, n/int(offered/5), calmOK.Load(), "the other agent is unaffected")

	var written int64
	require.NoError(t, p.db.QueryRow(`SELECT COUNT(*) FROM orchestrator_jobs WHERE agent IN ('flood', 'calm')`).Scan(&written))
	require.Equal(t, admitted.Load()+calmOK.Load(), written, "nothing written for a rejected job")

	// Every decision is counted, by the instance that made it.
	require.EqualValues(t, admitted.Load(), p.decisions(t, "flood", "admitted", "ok"))
	require.EqualValues(t, limited.Load(), p.decisions(t, "flood", "rejected", "rate_limited"))
	require.EqualValues(t, calmOK.Load(), p.decisions(t, "calm", "admitted", "ok"))
	require.Zero(t, p.decisions(t, "flood", "admitted", "limiter_unavailable"))
}

// decisions sums gpu_orchestrator_admission_decisions_total{agent,decision,reason} over the
// two instances' /metrics.
func (p *admissionPair) decisions(t *testing.T, agent, decision, reason string) float64 {
	t.Helper()
	series := fmt.Sprintf(`gpu_orchestrator_admission_decisions_total{agent=%q,decision=%q,reason=%q} `, agent, decision, reason)
	var sum float64
	for _, addr := range []string{p.addr, p.addrB} {
		resp, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		found := false
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, series); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				require.NoError(t, err)
				sum, found = sum+f, true
			}
		}
		require.True(t, found, "%s has no series %s", addr, series)
	}
	return sum
}

// testAdmissionPolicyChange changes a policy through one instance and sees the other enforce
// it, and back.
func testAdmissionPolicyChange(t *testing.T, p *admissionPair) {

	p.setPolicy(t, p.a, client.AdmissionPolicyUpdate{Agent: "tight", RatePerSec: ptr(0.01), Burst: ptr(1)})
	_, err := submitTo(p.b, "tight-1", "noop", "tight")
	require.NoError(t, err)
	retryAfter := requireCode(t, mustFail(submitTo(p.a, "tight-2", "noop", "tight")), http.StatusTooManyRequests, client.CodeRateLimited)
	require.Greater(t, retryAfter, time.Minute, "0.01 per second")
	requireCode(t, mustFail(submitTo(p.b, "tight-3", "noop", "tight")), http.StatusTooManyRequests, client.CodeRateLimited)

	p.setPolicy(t, p.b, client.AdmissionPolicyUpdate{Agent: "tight", Enabled: ptr(false)})
	for i, api := range []*client.Client{p.a, p.b} {
		_, err := submitTo(api, fmt.Sprintf("tight-free-%d", i), "noop", "tight")
		require.NoError(t, err, "an exempt agent is admitted on every instance")
	}

	// max_pending, counted in the shared database.
	p.setPolicy(t, p.a, client.AdmissionPolicyUpdate{Agent: "tight", Enabled: ptr(true), RatePerSec: ptr(1000.0), MaxPending: ptr(4)})
	_, err = submitTo(p.a, "tight-4", "noop", "tight")
	require.NoError(t, err)
	requireCode(t, mustFail(submitTo(p.b, "tight-5", "noop", "tight")), http.StatusTooManyRequests, client.CodeMaxPending)
	require.NoError(t, p.b.DeleteAdmissionPolicy(context.Background(), "tight"))
}

// testAdmissionFallback fills a GPU type's queue, overflows into its CPU fallback, fills
// that too, and sees the other instance count the same backlog.
func testAdmissionFallback(t *testing.T, p *admissionPair) {
	ctx := context.Background()
	for i := range 3 {
		resp, err := submitTo(p.a, fmt.Sprintf("gpu-%d", i), "gpu_infer", "agent")
		require.NoError(t, err)
		require.Empty(t, resp.RoutedFrom)
	}
	for i := range 2 {
		resp, err := submitTo(p.a, fmt.Sprintf("routed-%d", i), "gpu_infer", "agent")
		require.NoError(t, err)
		require.Equal(t, "cpu_infer", resp.Type, "the answer says where the job went")
		require.Equal(t, "gpu_infer", resp.RoutedFrom)
		job, err := p.a.GetJob(ctx, resp.JobID)
		require.NoError(t, err)
		require.Equal(t, "cpu_infer", job.Type)
	}
	retryAfter := requireCode(t, mustFail(submitTo(p.a, "refused", "gpu_infer", "agent")), http.StatusTooManyRequests, client.CodeQueueFull)
	require.Positive(t, retryAfter)

	// The other instance counts the same backlog from the database.
	require.Eventually(t, func() bool {
		st, err := p.b.GetAdmission(ctx)
		return err == nil && len(st.Queues) == 2 && st.Queues[0].Backlog == 2 && st.Queues[1].Backlog == 3
	}, 30*time.Second, 20*time.Millisecond, "orch-b never counted the backlog of orch-a's submits")
	requireCode(t, mustFail(submitTo(p.b, "refused-b", "gpu_infer", "agent")), http.StatusTooManyRequests, client.CodeQueueFull)
}

// testAdmissionGPUPressure pushes the cluster's GPU memory (rows of gpu_devices, as a node's
// telemetry writes them) over the high watermark and back: both instances close admission of
// the GPU type, keep CPU types open, stay closed between the watermarks and reopen below the
// low one once the hold has passed.
func testAdmissionGPUPressure(t *testing.T, p *admissionPair) {
	ctx := context.Background()
	setUsed := func(pct int) {
		t.Helper()
		_, err := p.db.Exec(`INSERT INTO gpu_devices (node_id, gpu_index, memory_total_mb, memory_used_mb, source, updated_at)
				VALUES ('e2e-gpu', 0, 10000, ?, 'simulated', UTC_TIMESTAMP(6))
				ON DUPLICATE KEY UPDATE memory_used_mb = VALUES(memory_used_mb), updated_at = VALUES(updated_at)`, pct*100)
		require.NoError(t, err)
	}
	waitGate := func(api *client.Client, pct float64, state string) {
		t.Helper()
		require.Eventually(t, func() bool {
			st, err := api.GetAdmission(ctx)
			return err == nil && st.GPU.PressurePct == pct && st.GPU.State == state
		}, 30*time.Second, 20*time.Millisecond, "gate never %s at %v%%", state, pct)
	}

	setUsed(95)
	waitGate(p.a, 95, client.GateClosed)
	waitGate(p.b, 95, client.GateClosed)
	for _, api := range []*client.Client{p.a, p.b} {
		requireCode(t, mustFail(submitTo(api, "", "gpu_infer", "agent")), http.StatusTooManyRequests, client.CodeGPUPressure)
		_, err := submitTo(api, "", "noop", "agent")
		require.NoError(t, err, "CPU types are accepted")
	}

	setUsed(85)
	waitGate(p.b, 85, client.GateClosed)
	requireCode(t, mustFail(submitTo(p.b, "", "gpu_infer", "agent")), http.StatusTooManyRequests, client.CodeGPUPressure)

	setUsed(75) // below the low watermark; the 1 s hold has passed or passes meanwhile
	waitGate(p.a, 75, client.GateOpen)
	waitGate(p.b, 75, client.GateOpen)
	st, err := p.b.GetAdmission(ctx)
	require.NoError(t, err)
	require.Equal(t, []client.AdmissionNodePressure{{NodeID: "e2e-gpu", PressurePct: 75, UsedMB: 7500, TotalMB: 10000,
		GPUs: 1, Fresh: true, Age: st.GPU.Nodes[0].Age}}, st.GPU.Nodes)
}

func mustFail(_ client.SubmitResponse, err error) error { return err }

func ptr[T any](v T) *T { return &v }
