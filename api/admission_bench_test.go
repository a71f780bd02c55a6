package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

// Load of BenchmarkSubmitAdmission: concurrent clients, submits per round and arm.
const (
	benchClients = 16
	benchRound   = 400
)

// BenchmarkSubmitAdmission measures what admission control costs a submit: the submit handler
// end to end (auth, decoding, the engine's transaction and XADD against the real MariaDB and
// Redis) on a server without a controller (off) and on one with (on), where every submit is
// admitted after the whole check, for two agents: "alice" with a policy of 10^6/s, whose
// tokens the limiter takes in batches (one Redis call per many submits), and "bob" with
// 99/s and a burst the run never exhausts, which is never batched (one Redis call per submit,
// the worst case).
//
// Each iteration is one round: benchRound submits from benchClients concurrent clients per
// arm, the arms in a rotating order, so that a drift of the machine's load (a shared
// database) hits them alike. It reports each arm's submits/s over all rounds, and the cost of
// admission in percent of the off arm as the median over the rounds of each round's own
// comparison, which a burst of outside load in one round does not sway:
//
//	go test -run '^$' -bench BenchmarkSubmitAdmission -benchtime 12x ./api/
func BenchmarkSubmitAdmission(b *testing.B) {
	off := setup(b)
	on, _ := setupAdmission(b, nil)
	for _, u := range []wire.AdmissionPolicyUpdate{
		{Agent: "alice", RatePerSec: ptr(1e6), Burst: ptr(10_000_000)},
		{Agent: "bob", RatePerSec: ptr(99.0), Burst: ptr(10_000_000)},
	} {
		rec := serve(b, on, http.MethodPut, "/control/admission", "admin", u)
		require.Equal(b, http.StatusOK, rec.Code, rec.Body.String())
	}
	arms := []struct {
		name   string
		bn     *bundle
		agent  string
		took   time.Duration
		rounds []time.Duration
	}{{name: "off", bn: off, agent: "alice"}, {name: "on-batched", bn: on, agent: "alice"}, {name: "on-unbatched", bn: on, agent: "bob"}}
	var (
		seq    atomic.Int64
		rounds int
	)
	for b.Loop() {
		for i := range arms {
			a := &arms[(rounds+i)%len(arms)]
			d := submitRound(b, a.bn, a.agent, &seq)
			a.took += d
			a.rounds = append(a.rounds, d)
		}
		rounds++
	}
	n := float64(rounds * benchRound)
	offRate := n / arms[0].took.Seconds()
	b.ReportMetric(offRate, "off-submits/s")
	for _, a := range arms[1:] {
		b.ReportMetric(n/a.took.Seconds(), a.name+"-submits/s")
		costs := make([]float64, rounds)
		for r := range rounds {
			// The throughput lost, in percent: 1 − rate_on/rate_off = 1 − t_off/t_on.
			costs[r] = 100 * (1 - arms[0].rounds[r].Seconds()/a.rounds[r].Seconds())
		}
		slices.Sort(costs)
		b.ReportMetric(costs[rounds/2], a.name+"-median-cost-%")
	}
}

// submitRound sends benchRound submits of agent who (a token of the bundle) from benchClients
// goroutines and returns how long they took.
func submitRound(b *testing.B, bn *bundle, who string, seq *atomic.Int64) time.Duration {
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	start := time.Now()
	for range benchClients {
		wg.Go(func() {
			for next.Add(1) <= benchRound {
				body := wire.SubmitRequest{JobID: fmt.Sprintf("bench-%d", seq.Add(1)), Type: "noop", Payload: []byte(`{}`)}
				if rec := serve(b, bn, http.MethodPost, "/jobs/submit", who, body); rec.Code != http.StatusAccepted {
					b.Errorf("submit: %d %s", rec.Code, rec.Body.String())
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// serve sends one JSON request to the bundle's handler (bundle.request, for benchmarks).
func serve(tb testing.TB, b *bundle, method, path, who string, body any) *httptest.ResponseRecorder {
	raw, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	req := httptest.NewRequest(method, path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.tokens[who])
	rec := httptest.NewRecorder()
	b.srv.Handler().ServeHTTP(rec, req)
	return rec
}
