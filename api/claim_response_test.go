package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestEncodeClaimResponse(t *testing.T) {
	t.Parallel()
	gpu := 1
	expires := time.Date(2026, 11, 26, 7, 0, 0, 123456000, time.UTC)
	job := func(id string, payload string) client.ClaimedJob {
		return client.ClaimedJob{JobID: id, Type: "inference", Payload: json.RawMessage(payload), Attempt: 2,
			Timeout: client.Duration(time.Minute), LeaseToken: "lt_" + id, GPUIndex: &gpu, GPUMemoryMB: 1024,
			LeaseTTL: client.Duration(30 * time.Second), LeaseExpiresAt: &expires}
	}
	rest := client.ClaimResponse{
		Refused:  []client.ClaimRefusal{{JobID: "gone", Reason: client.ReasonNotFound}},
		Outcomes: []client.CompleteOutcome{{JobID: "prev", Outcome: "done"}},
		Cancel:   []string{"c1"},
	}

	t.Run("SameBytesAsMarshal", func(t *testing.T) {
		// Compact payloads without characters escaped for HTML: byte for byte what
		// json.Marshal writes.
		t.Parallel()
		for _, resp := range []client.ClaimResponse{
			{Claimed: []client.ClaimedJob{}, Refused: []client.ClaimRefusal{}},
			{Claimed: []client.ClaimedJob{job("a", `{}`)}, Refused: []client.ClaimRefusal{}},
			{Claimed: []client.ClaimedJob{job("a", `{"prompt":"héllo \"quoted\"","n":[1,2.5,null,true]}`),
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
		resp.Claimed = []client.ClaimedJob{job("a", payload), job("b", `{}`)}
		got, err := encodeClaimResponse(resp)
		require.NoError(t, err)
		require.True(t, json.Valid(got), "%s", got)
		require.Contains(t, string(got), `"payload":`+payload+`,"attempt":2`)

		var decoded client.ClaimResponse
		require.NoError(t, json.Unmarshal(got, &decoded))
		require.Len(t, decoded.Claimed, 2)
		require.JSONEq(t, payload, string(decoded.Claimed[0].Payload))
		decoded.Claimed[0].Payload = resp.Claimed[0].Payload
		require.Equal(t, resp, decoded)
	})

	t.Run("MissingPayloadIsNull", func(t *testing.T) {
		t.Parallel()
		resp := client.ClaimResponse{Claimed: []client.ClaimedJob{{JobID: "a", Type: "t"}}, Refused: []client.ClaimRefusal{}}
		got, err := encodeClaimResponse(resp)
		require.NoError(t, err)
		require.Contains(t, string(got), `"payload":null`)
		want, err := json.Marshal(resp)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	})
}
