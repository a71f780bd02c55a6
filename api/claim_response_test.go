package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

func TestEncodeClaimResponse(t *testing.T) {
	t.Parallel()
	gpu := 1
	expires := time.Date(2026, 11, 26, 7, 0, 0, 123456000, time.UTC)
	job := func(id string, payload string) wire.ClaimedJob {
		return wire.ClaimedJob{JobID: id, Type: "inference", Payload: json.RawMessage(payload), Attempt: 2,
			Timeout: wire.Duration(time.Minute), LeaseToken: "lt_" + id, GPUIndex: &gpu, GPUMemoryMB: 1024,
			LeaseTTL: wire.Duration(30 * time.Second), LeaseExpiresAt: &expires}
	}
	rest := wire.ClaimResponse{
		Refused:  []wire.ClaimRefusal{{JobID: "gone", Reason: wire.ReasonNotFound}},
		Outcomes: []wire.CompleteOutcome{{JobID: "prev", Outcome: "done"}},
		Cancel:   []string{"c1"},
	}

	t.Run("SameBytesAsMarshal", func(t *testing.T) {
		// Compact payloads without characters escaped for HTML: byte for byte what
		// json.Marshal writes.
		t.Parallel()
		for _, resp := range []wire.ClaimResponse{
			{Claimed: []wire.ClaimedJob{}, Refused: []wire.ClaimRefusal{}},
			{Claimed: []wire.ClaimedJob{job("a", `{}`)}, Refused: []wire.ClaimRefusal{}},
			{Claimed: []wire.ClaimedJob{job("a", `{"prompt":"héllo \"quoted\"","n":[1,2.5,null,true]}`),
				job("b", `"payload"`), job("c", `null`), {JobID: "d", Type: "t", Payload: json.RawMessage(`[]`)}},
				Refused: rest.Refused, Outcomes: rest.Outcomes, Cancel: rest.Cancel},
		} {
			want, err := json.Marshal(resp)
			require.NoError(t, err)
			got, err := encodeClaimResponse(resp)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		}
	})

	t.Run("PayloadCopiedAsIs", func(t *testing.T) {
		// A payload keeps its white space and its <, > and &, which json.Marshal would
		// compact and escape; the answer decodes to the same values.
		t.Parallel()
		payload := "{ \"html\": \"<b>a & b</b>\",\n  \"k\": [1, 2] }"
		resp := rest
		resp.Claimed = []wire.ClaimedJob{job("a", payload), job("b", `{}`)}
		got, err := encodeClaimResponse(resp)
		require.NoError(t, err)
		require.True(t, json.Valid(got), "%s", got)
		require.Contains(t, string(got), `"payload":`+payload+`,"attempt":2`)

		var decoded wire.ClaimResponse
		require.NoError(t, json.Unmarshal(got, &decoded))
		require.Len(t, decoded.Claimed, 2)
		require.JSONEq(t, payload, string(decoded.Claimed[0].Payload))
		decoded.Claimed[0].Payload = resp.Claimed[0].Payload
		require.Equal(t, resp, decoded)
	})

	t.Run("MissingPayloadIsNull", func(t *testing.T) {
		t.Parallel()
		resp := wire.ClaimResponse{Claimed: []wire.ClaimedJob{{JobID: "a", Type: "t"}}, Refused: []wire.ClaimRefusal{}}
		got, err := encodeClaimResponse(resp)
		require.NoError(t, err)
		require.Contains(t, string(got), `"payload":null`)
		want, err := json.Marshal(resp)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	})
}

// FuzzEncodeClaimResponse checks the splice against json.Marshal for arbitrary ids, types and
// JSON payloads, including ids that spell `,"payload":null`: the two answers decode to the
// same response, and to the same bytes when json.Marshal had nothing to compact or escape.
// The seeds run with every go test:
//
//	go test -run '^$' -fuzz '^FuzzEncodeClaimResponse$' -fuzztime 60s ./api/
func FuzzEncodeClaimResponse(f *testing.F) {
	for _, seed := range [][3]string{
		{"a", "noop", `{}`},
		{`,"payload":null`, `"payload":null,`, `{"payload":null}`},
		{"job\"1", "t<y>&pe", ` [ 1 , "<&>" , {"k" : null} ] `},
		{"é\u2028", "", `"\u0000\ud800"`},
		{"", "x", `123e-4`},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, id, typ, payload string) {
		if !json.Valid([]byte(payload)) {
			t.Skip("payloads are JSON by the time they are claimed")
		}
		resp := wire.ClaimResponse{
			Claimed: []wire.ClaimedJob{
				{JobID: id, Type: typ, Payload: json.RawMessage(payload), Attempt: 1},
				{JobID: typ, Type: id, Payload: json.RawMessage(`{}`)},
			},
			Refused: []wire.ClaimRefusal{{JobID: id, Reason: wire.ReasonNotPending, Detail: payload}},
		}
		want, err := json.Marshal(resp)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		got, err := encodeClaimResponse(resp)
		if err != nil {
			t.Fatalf("encodeClaimResponse: %v", err)
		}
		var w, g any
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("the answer is not JSON: %v\n%s", err, got)
		}
		require.Equal(t, w, g)
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(payload)) == nil && compact.String() == payload &&
			!strings.ContainsAny(payload, "<>&") && !strings.Contains(payload, "\u2028") && !strings.Contains(payload, "\u2029") {
			require.Equal(t, string(want), string(got))
		}
	})
}
