package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// Load of BenchmarkSubmitAdmission: concurrent clients, submits per round and arm.
const (
	benchClients = 16
	benchRound   = 400
)

// BenchmarkSubmitAdmission measures what admission control costs a submit: the submit handler
// end to end (auth, decoding, the engine's transaction and XADD against the real MariaDB and
// Redis) on two servers, one without a controller (off) and one with (on: a policy whose
// bucket the load never empties, so every submit pays the whole check and is admitted).
//
// Each iteration is one round: benchRound submits from benchClients concurrent clients on
// each server, the order of the two alternating between rounds, so that a drift of the
// machine's load (a shared database) hits both arms alike. It reports each arm's submits/s
// over all rounds and the cost of admission in percent:
//
//	go test -run '^$' -bench BenchmarkSubmitAdmission -benchtime 10x ./api/
func BenchmarkSubmitAdmission(b *testing.B) {
	off := setup(b)
	on, _ := setupAdmission(b, nil)
	rec := serve(b, on, http.MethodPut, "/control/admission", "admin",
		client.AdmissionPolicyUpdate{Agent: "alice", RatePerSec: ptr(1e6), Burst: ptr(10_000_000)})
	require.Equal(b, http.StatusOK, rec.Code, rec.Body.String())

	var (
		seq             atomic.Int64
		tookOff, tookOn time.Duration
		rounds          int
	)
	for b.Loop() {
		if rounds%2 == 0 {
			tookOff += submitRound(b, off, &seq)
			tookOn += submitRound(b, on, &seq)
		} else {
			tookOn += submitRound(b, on, &seq)
			tookOff += submitRound(b, off, &seq)
		}
		rounds++
	}
	n := float64(rounds * benchRound)
	offRate, onRate := n/tookOff.Seconds(), n/tookOn.Seconds()
	b.ReportMetric(offRate, "off-submits/s")
	b.ReportMetric(onRate, "on-submits/s")
	b.ReportMetric(100*(offRate-onRate)/offRate, "cost-%")
}

// submitRound sends benchRound submits from benchClients goroutines and returns how long they
// took.
func submitRound(b *testing.B, bn *bundle, seq *atomic.Int64) time.Duration {
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	start := time.Now()
	for range benchClients {
		wg.Go(func() {
			for next.Add(1) <= benchRound {
				body := client.SubmitRequest{JobID: fmt.Sprintf("bench-%d", seq.Add(1)), Type: "noop", Payload: []byte(`{}`)}
				if rec := serve(b, bn, http.MethodPost, "/jobs/submit", "alice", body); rec.Code != http.StatusAccepted {
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
