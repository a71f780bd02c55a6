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
