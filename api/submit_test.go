package api

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/wire"
)

// badSubmit is one submit body that must be refused with 400 naming field.
type badSubmit struct {
	name  string
	body  string
	field string
}

// badSubmits are built for agent, who owns nothing else, so "no row left" is a count of zero.
func badSubmits(agent string) []badSubmit {
	big := `"` + strings.Repeat("x", testMaxPayload) + `"` // a JSON string just over the limit
	ok := func(fields string) string {
		return fmt.Sprintf(`{"type":"noop","agent":%q,"payload":{}%s}`, agent, fields)
	}
	return []badSubmit{
		{"MissingType", fmt.Sprintf(`{"agent":%q,"payload":{}}`, agent), "type"},
		{"UnknownType", fmt.Sprintf(`{"type":"rm_rf","agent":%q,"payload":{}}`, agent), "type"},
		{"MissingAgent", `{"type":"noop","payload":{}}`, "agent"},
		{"BadAgent", `{"type":"noop","agent":"a b","payload":{}}`, "agent"},
		{"MissingPayload", fmt.Sprintf(`{"type":"noop","agent":%q}`, agent), "payload"},
		{"OversizePayload", fmt.Sprintf(`{"type":"noop","agent":%q,"payload":%s}`, agent, big), "payload"},
		{"BadJobID", ok(`,"job_id":"has space"`), "job_id"},
		{"LongJobID", ok(`,"job_id":"` + strings.Repeat("j", 129) + `"`), "job_id"},
		{"NumericJobID", ok(`,"job_id":5`), "job_id"},
		{"ZeroMaxAttempts", ok(`,"max_attempts":0`), "max_attempts"},
		{"HugeMaxAttempts", ok(`,"max_attempts":101`), "max_attempts"},
		{"FractionalMaxAttempts", ok(`,"max_attempts":1.5`), "max_attempts"},
		{"ZeroTimeout", ok(`,"timeout":0`), "timeout"},
		{"NegativeTimeout", ok(`,"timeout":"-1s"`), "timeout"},
		{"LongTimeout", ok(`,"timeout":"25h"`), "timeout"},
		{"GarbledTimeout", ok(`,"timeout":"soon"`), "timeout"},
		{"UnknownField", ok(`,"urgency":5`), "urgency"},
		{"TypeIsNotAString", fmt.Sprintf(`{"type":7,"agent":%q,"payload":{}}`, agent), "type"},
		{"NotAnObject", `[1,2]`, ""},
		{"InvalidJSON", `{"type":`, ""},
		{"SyntaxError", `{"type" "noop"}`, ""},
		{"TrailingGarbage", ok("") + ` x`, ""},
		{"TwoObjects", ok("") + ok(""), ""},
		{"Empty", ``, ""},
		// Strictness: what encoding/json lets through (issue 25).
		{"CaseMismatchedField", fmt.Sprintf(`{"Type":"noop","agent":%q,"payload":{}}`, agent), "Type"},
		{"DuplicateKey", ok(`,"type":"sleep"`), "type"},
		{"DotJobID", ok(`,"job_id":"."`), "job_id"},
		{"DotDotJobID", ok(`,"job_id":".."`), "job_id"},
		{"DotDotAgent", `{"type":"noop","agent":"..","payload":{}}`, "agent"},
		{"InvalidUTF8Type", fmt.Sprintf("{\"type\":\"noop\xff\",\"agent\":%q,\"payload\":{}}", agent), "type"},
		{"InvalidUTF8Payload", fmt.Sprintf("{\"type\":\"noop\",\"agent\":%q,\"payload\":{\"s\":\"\xff\"}}", agent), "payload.s"},
		{"InvalidUTF8PayloadKey", fmt.Sprintf("{\"type\":\"noop\",\"agent\":%q,\"payload\":{\"\xc3\":1}}", agent), "payload"},
		{"LoneSurrogatePayload", fmt.Sprintf(`{"type":"noop","agent":%q,"payload":["\ud800"]}`, agent), "payload[0]"},
		{"DuplicateKeyInPayload", fmt.Sprintf(`{"type":"noop","agent":%q,"payload":{"a":1,"a":2}}`, agent), "payload.a"},
		{"DeepPayload", fmt.Sprintf(`{"type":"noop","agent":%q,"payload":%s}`, agent, deepJSON(MaxJSONDepth)),
			"payload" + strings.Repeat("[0]", 19) + "…"},
		{"TimeoutOverflowsDuration", ok(`,"timeout":9223372037`), "timeout"},
		{"TimeoutWrapsAround", ok(`,"timeout":18446744074`), "timeout"},
		{"TimeoutOutOfFloatRange", ok(`,"timeout":1e400`), "timeout"},
		{"TimeoutUnderANanosecond", ok(`,"timeout":1e-10`), "timeout"},
	}
}

// deepJSON is an array nested n deep.
func deepJSON(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestSubmitBadInputWithoutDatabase runs the bad-input table against a stack whose database is
// down: a 400 there proves the input was refused before the engine reached the database.
func TestSubmitBadInputWithoutDatabase(t *testing.T) {
	t.Parallel()
	b := setupDown(t)
	for _, c := range badSubmits("alice") {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "admin", c.body), http.StatusBadRequest, CodeInvalidRequest, c.field)
		})
	}
}

// TestSubmitBadInputLeavesNoRow runs the table against the real stack and checks the database.
func TestSubmitBadInputLeavesNoRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, c := range badSubmits("") {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			agent := fmt.Sprintf("bad-%d", i)
			body := strings.ReplaceAll(c.body, `"agent":""`, fmt.Sprintf(`"agent":%q`, agent))
			requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "admin", body), http.StatusBadRequest, CodeInvalidRequest, c.field)
			require.Zero(t, b.countJobs(t, agent))
		})
	}
	list := decode[wire.JobList](t, b.request(t, http.MethodGet, "/jobs", "admin", nil))
	require.Empty(t, list.Jobs)
}

func TestSubmitBodyLimits(t *testing.T) {
	t.Parallel()
	b := setupDown(t)

	t.Run("OversizeBodyIs413", func(t *testing.T) {
		t.Parallel()
		pad := strings.Repeat(" ", testMaxPayload+submitEnvelopeBytes)
		rec := b.request(t, http.MethodPost, "/jobs/submit", "admin", `{"type":"noop",`+pad+`"agent":"a","payload":{}}`)
		d := requireError(t, rec, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "")
		// The limit is named, as the 400 of an oversize payload names its own.
		require.Equal(t, fmt.Sprintf("request body is over the limit of %d bytes", testMaxPayload+submitEnvelopeBytes), d.Message)
	})
	t.Run("OversizeTrailingDataIs413", func(t *testing.T) {
		t.Parallel()
		pad := strings.Repeat(" ", testMaxPayload+submitEnvelopeBytes)
		rec := b.request(t, http.MethodPost, "/jobs/submit", "admin", `{"type":"noop","agent":"a","payload":{}}`+pad+"x")
		requireError(t, rec, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "")
	})
	t.Run("OversizeInternalBodyIs413", func(t *testing.T) {
		t.Parallel()
		pad := strings.Repeat(" ", internalBodyBytes)
		rec := b.request(t, http.MethodPost, "/internal/jobs/complete", "worker", `{"worker_id":"w1",`+pad+`"results":[]}`)
		d := requireError(t, rec, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "")
		require.Equal(t, fmt.Sprintf("request body is over the limit of %d bytes (8.00 MiB)", internalBodyBytes), d.Message)
	})
	t.Run("TrailingWhitespaceIsFine", func(t *testing.T) {
		t.Parallel()
		// Past decoding, the engine needs the database: 503 shows decoding accepted it.
		rec := b.request(t, http.MethodPost, "/jobs/submit", "admin", `{"type":"noop","agent":"a","payload":{}}`+"\n\t ")
		requireError(t, rec, http.StatusServiceUnavailable, CodeUnavailable, "")
	})
}

// TestSubmitUnknownTypeSaysHowToConfigure: a submit of a type the server does not know says
// which types it knows and where a type is configured, through POST /jobs/submit and in the
// batch's per-job error alike.
func TestSubmitUnknownTypeSaysHowToConfigure(t *testing.T) {
	t.Parallel()
	b := setupDown(t)
	want := func(t *testing.T, msg string) {
		t.Helper()
		require.Contains(t, msg, `unknown job type "exec"`)
		require.Contains(t, msg, "(configured: inference, ingest, noop, preload, sleep)")
		require.Contains(t, msg, "job_types")
		require.Contains(t, msg, "ORCH_CONFIG")
		require.Contains(t, msg, "docs/configuration.md#job-types")
	}
	d := requireError(t, b.request(t, http.MethodPost, "/jobs/submit", "admin", `{"type":"exec","agent":"a","payload":{}}`),
		http.StatusBadRequest, CodeInvalidRequest, "type")
	want(t, d.Message)
	rec := b.request(t, http.MethodPost, "/jobs/submit_batch", "admin", `{"jobs":[{"type":"exec","agent":"a","payload":{}}]}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	res := decode[wire.SubmitBatchResponse](t, rec)
	require.Len(t, res.Results, 1)
	require.NotNil(t, res.Results[0].Error)
	want(t, res.Results[0].Error.Message)
}

// TestUnknownTypeMessageIsBounded: a configuration with many types lists the first ones only.
func TestUnknownTypeMessageIsBounded(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{JobTypes: map[string]*config.JobType{}}
	require.Contains(t, engine.UnknownTypeMessage(cfg, "x"), "(configured: none)")
	for i := range 50 {
		name := fmt.Sprintf("t%02d", i)
		cfg.JobTypes[name] = &config.JobType{Name: name}
	}
	msg := engine.UnknownTypeMessage(cfg, "x")
	require.Contains(t, msg, "t00, t01")
	require.Contains(t, msg, "t19 and 30 more)")
	require.NotContains(t, msg, "t20")
}

func TestSubmitAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("NullPayloadAndOverrides", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/jobs/submit", "alice",
			`{"job_id":"null-payload","type":"noop","payload":null,"max_attempts":7,"timeout":"90s"}`)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/null-payload", "alice", nil))
		require.Equal(t, "alice", job.Agent, "the agent comes from the token")
		require.Equal(t, 7, job.MaxAttempts)
		require.Equal(t, wire.Duration(90e9), job.Timeout)
		require.JSONEq(t, `null`, string(orNull(job.Payload)))
	})
	t.Run("TimeoutInSeconds", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/jobs/submit", "admin",
			`{"job_id":"secs","type":"noop","agent":"carol","payload":[1],"timeout":2.5}`)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		job := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/secs", "admin", nil))
		require.Equal(t, wire.Duration(2500e6), job.Timeout)
		require.Equal(t, "carol", job.Agent, "an admin submits for any agent")
		require.JSONEq(t, `[1]`, string(job.Payload))
	})
	t.Run("PayloadAtTheLimit", func(t *testing.T) {
		t.Parallel()
		payload := `"` + strings.Repeat("x", testMaxPayload-2) + `"`
		rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", `{"type":"noop","payload":`+payload+`}`)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	})
}

// orNull shows an omitted payload as the JSON null it stood for.
func orNull(raw []byte) []byte {
	if len(raw) == 0 {
		return []byte("null")
	}
	return raw
}

// TestSubmitBodyMatchesWire keeps the decoding shadow of SubmitRequest in step with the wire type:
// a field added to one only would be refused as unknown, or silently dropped.
func TestSubmitBodyMatchesWire(t *testing.T) {
	t.Parallel()
	names := func(v any) []string {
		var out []string
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			out = append(out, name)
		}
		return out
	}
	require.ElementsMatch(t, names(wire.SubmitRequest{}), names(submitBody{}))
}
