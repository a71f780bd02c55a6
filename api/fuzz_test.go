package api

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/gpuorch/orchestrator/client"
)

// FuzzSubmit sends arbitrary bodies to POST /jobs/submit on the real stack, as an agent and as
// an admin: the answer is never a 5xx and never a panic, is always JSON, and a 400 names a code.
// CI runs it for a bounded time (make fuzz); the seeds run with every go test.
func FuzzSubmit(f *testing.F) {
	for _, seed := range []string{
		`{"type":"noop","agent":"alice","payload":{}}`,
		`{"job_id":"a.b:c-d_e","type":"sleep","agent":"alice","payload":{"ms":1},"max_attempts":3,"timeout":"2s"}`,
		`{"type":"noop","agent":"alice","payload":null,"timeout":1.5}`,
		`{"type":"noop","agent":"bob","payload":[]}`,
		`{"type":"noop","agent":"alice","payload":{},"extra":1}`,
		`{"type":"noop","agent":"alice","payload":{}} trailing`,
		`{"type":"noop","agent":"alice","payload":"\u0000"}`,
		`{"job_id":"` + "\u00e9" + `","type":"noop","agent":"alice","payload":{}}`,
		`{"type":7}`, `[]`, `null`, ``, `{`, `{"timeout":"-5s"}`, `{"max_attempts":1e99}`,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	b := setup(f)
	f.Fuzz(func(t *testing.T, body string, admin bool) {
		who := "alice"
		if admin {
			who = "admin"
		}
		rec := b.request(t, http.MethodPost, "/jobs/submit", who, body)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		switch rec.Code {
		case http.StatusOK, http.StatusAccepted:
			var resp client.SubmitResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.JobID == "" {
				t.Fatalf("status %d with a bad body %q: %v", rec.Code, rec.Body.String(), err)
			}
		case http.StatusBadRequest, http.StatusForbidden, http.StatusConflict, http.StatusRequestEntityTooLarge:
			var eb client.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
				t.Fatalf("status %d with a bad error body %q: %v", rec.Code, rec.Body.String(), err)
			}
		default:
			t.Fatalf("unexpected status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
	})
}

// FuzzLeaseRequest sends arbitrary bodies to POST /leases as an agent: never a 5xx, never a
// panic, and every refusal is a JSON error with a code.
func FuzzLeaseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"agent":"alice","min_memory_mb":1024,"ttl_seconds":30,"mode":"gpu"}`,
		`{"min_memory_mb":0,"mode":"cpu"}`,
		`{"agent":"alice","node_id":"n1","min_memory_mb":-5,"mode":"gpu","exclusive":true}`,
		`{"mode":"tpu"}`, `{"ttl_seconds":1e12}`, `{"agent":"bob","mode":"cpu"}`, `{}`, `[]`, ``, `{`,
	} {
		f.Add(seed)
	}
	b := setup(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := b.request(t, http.MethodPost, "/leases", "alice", body)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		if rec.Code >= 400 {
			var eb client.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" {
				t.Fatalf("status %d with a bad error body %q: %v", rec.Code, rec.Body.String(), err)
			}
		}
	})
}
