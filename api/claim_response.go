package api

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/gpuorch/orchestrator/wire"
)

// jsonContentType is the Content-Type of a JSON answer, as gin's c.JSON sets it.
const jsonContentType = "application/json; charset=utf-8"

// payloadNull is what a claimed job's payload field reads as when marshalled without it.
const payloadNull = `,"payload":null`

// claimedPrefix opens every encoded ClaimResponse: its first field is the claimed jobs.
const claimedPrefix = `{"claimed":[`

// encodeClaimResponse encodes resp as json.Marshal would, but copies each claimed job's
// payload as it is. encoding/json validates and compacts every json.RawMessage it writes, so
// a claim of jobs with large payloads scanned each payload once more. With 64 KiB payloads
// that scan was the orchestrator's largest cost (docs/performance.md). The payloads need no
// check here: each was read as JSON before its INSERT (by the API's decoder, or by the
// engine's json.Valid for other callers), and nothing writes a payload after that.
//
// The payload bytes are copied unchanged, so characters that json.Marshal would escape for
// HTML (<, >, &) stay as they were submitted. Both forms decode to the same value.
func encodeClaimResponse(resp wire.ClaimResponse) ([]byte, error) {
	claimed := resp.Claimed
	resp.Claimed = []wire.ClaimedJob{}
	rest, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encode claim response: %w", err)
	}
	if !bytes.HasPrefix(rest, []byte(claimedPrefix+"]")) {
		return nil, fmt.Errorf("encode claim response: unexpected start %.20q", rest)
	}
	size := len(rest)
	for _, cj := range claimed {
		size += len(cj.Payload) + 256
	}
	out := make([]byte, 0, size)
	out = append(out, claimedPrefix...)
	for i, cj := range claimed {
		if i > 0 {
			out = append(out, ',')
		}
		if out, err = appendClaimedJob(out, cj); err != nil {
			return nil, err
		}
	}
	return append(out, rest[len(claimedPrefix):]...), nil
}

// appendClaimedJob appends the encoding of cj to out, with its payload copied as it is (null
// when it has none).
func appendClaimedJob(out []byte, cj wire.ClaimedJob) ([]byte, error) {
	payload := cj.Payload
	cj.Payload = nil
	b, err := json.Marshal(cj)
	if err != nil {
		return nil, fmt.Errorf("encode claimed job %s: %w", cj.JobID, err)
	}
	// The payload follows job_id and type, both JSON strings, in which a quote is always
	// escaped: the first `,"payload":null` is the field itself.
	i := bytes.Index(b, []byte(payloadNull))
	if i < 0 {
		return nil, fmt.Errorf("encode claimed job %s: no payload field in %.60q", cj.JobID, b)
	}
	if len(payload) == 0 {
		return append(out, b...), nil
	}
	out = append(out, b[:i+len(payloadNull)-len("null")]...)
	out = append(out, payload...)
	return append(out, b[i+len(payloadNull):]...), nil
}
