package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

// deepObject is a JSON object nested n deep: {"a":{"a":…{}…}}.
func deepObject(n int) string {
	return strings.Repeat(`{"a":`, n-1) + "{}" + strings.Repeat("}", n-1)
}

// TestLeaseRequestStrict: POST /leases refuses what the database would (invalid UTF-8 and
// nesting past MariaDB's JSON_VALID in metadata: a 500 before), ttl_seconds that overflow a
// time.Duration (a lease expiring in 1734, or after 0.29 s, before), and the strictness of
// every body; each a 400 naming the field. Real MariaDB: the metadata is stored.
func TestLeaseRequestStrict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ name, body, field, msg string }{
		{"TTLOverflowsDuration", `{"mode":"cpu","ttl_seconds":9223372037}`, "ttl_seconds", "1..86400"},
		{"TTLWrapsAround", `{"mode":"cpu","ttl_seconds":18446744074}`, "ttl_seconds", "1..86400"},
		{"TTLPastTheLimit", `{"mode":"cpu","ttl_seconds":86401}`, "ttl_seconds", "1..86400"},
		{"MetadataInvalidUTF8", "{\"mode\":\"cpu\",\"metadata\":{\"k\":\"\xff\"}}", "metadata.k", "UTF-8"},
		{"MetadataLoneSurrogate", `{"mode":"cpu","metadata":{"k":"\ud800"}}`, "metadata.k", "surrogate"},
		{"MetadataTooDeep", `{"mode":"cpu","metadata":` + deepObject(MetadataMaxDepth+1) + `}`,
			"metadata" + strings.Repeat(".a", MetadataMaxDepth), "16 levels"},
		{"MetadataDuplicateKey", `{"mode":"cpu","metadata":{"k":1,"k":2}}`, "metadata.k", "duplicate"},
		{"CaseMismatchedField", `{"Mode":"cpu"}`, "Mode", `case-sensitive: "mode"`},
		{"DuplicateField", `{"mode":"gpu","mode":"cpu"}`, "mode", "duplicate"},
		{"DotDotAgent", `{"mode":"cpu","agent":".."}`, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			who := "alice"
			if c.name == "DotDotAgent" {
				who, c.field = "admin", "agent"
			}
			e := requireError(t, b.request(t, http.MethodPost, "/leases", who, c.body), http.StatusBadRequest, CodeInvalidRequest, c.field)
			require.Contains(t, e.Message, c.msg)
		})
	}
	t.Run("MetadataAtItsLimit", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/leases", "alice", `{"mode":"cpu","ttl_seconds":86400,"metadata":`+deepObject(MetadataMaxDepth)+`}`)
		require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	})
}

// TestPoolRequestStrict: POST /workers/pool decodes through the same decoder: its metadata and
// ids get the same checks (a 500 from MariaDB before, for metadata).
func TestPoolRequestStrict(t *testing.T) {
	t.Parallel()
	b, _ := setupPools(t)
	pool := func(id, extra string) string {
		return fmt.Sprintf(`{"pool_id":%q,"agent_name":"alice","model_id":"m","types":["noop"],"desired_workers":0%s}`, id, extra)
	}
	for _, c := range []struct{ name, body, field string }{
		{"DotDotPoolID", pool("..", ""), "pool_id"},
		{"DotPoolID", pool(".", ""), "pool_id"},
		{"MetadataInvalidUTF8", pool("p1", ",\"metadata\":{\"k\":\"\xc3\"}"), "metadata.k"},
		{"MetadataTooDeep", pool("p2", `,"metadata":`+deepObject(MetadataMaxDepth+1)), "metadata" + strings.Repeat(".a", MetadataMaxDepth)},
		{"CaseMismatchedField", `{"Pool_ID":"p3"}`, "Pool_ID"},
		{"DuplicateField", pool("p4", `,"pool_id":"p5"`), "pool_id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			requireError(t, b.request(t, http.MethodPost, "/workers/pool", "admin", c.body), http.StatusBadRequest, CodeInvalidRequest, c.field)
		})
	}
	rec := b.request(t, http.MethodPost, "/workers/pool", "admin", pool("p-ok", `,"metadata":`+deepObject(MetadataMaxDepth)))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
}

// TestSubmitBatchBadPayloadFailsAlone: a batch [ok, bad, ok] whose bad job the database would
// have refused (invalid UTF-8: MariaDB Error 1366, which failed all three as internal before)
// answers the bad one 400 naming its field and creates the others.
func TestSubmitBatchBadPayloadFailsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, bad := range map[string]string{
		"InvalidUTF8":    "{\"s\":\"\xff\"}",
		"LoneSurrogate":  `"\udbff"`,
		"TooDeep":        deepJSON(MaxJSONDepth),
		"DuplicateKey":   `{"k":1,"k":1}`,
		"InvalidUTF8Key": "{\"\xfe\":1}",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			agent := "fa-" + strings.ToLower(name)
			body := fmt.Sprintf(`{"jobs":[{"type":"noop","agent":%[1]q,"payload":1},{"job_id":"bad-%[1]s","type":"noop","agent":%[1]q,"payload":%[2]s},{"type":"noop","agent":%[1]q,"payload":3}]}`,
				agent, bad)
			rec := b.request(t, http.MethodPost, "/jobs/submit_batch", "admin", body)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			resp := decode[wire.SubmitBatchResponse](t, rec)
			require.Equal(t, 2, resp.Created)
			require.Equal(t, 1, resp.Failed)
			e := resp.Results[1].Error
			require.NotNil(t, e)
			require.Equal(t, CodeInvalidRequest, e.Code)
			require.True(t, strings.HasPrefix(e.Field, "payload"), e.Field)
			require.Equal(t, "bad-"+agent, resp.Results[1].JobID)
			require.Len(t, b.allJobs(t, agent), 2)
		})
	}
}
