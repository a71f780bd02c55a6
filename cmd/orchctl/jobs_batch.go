package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

// submitBatchChunk is how many jobs `jobs submit-batch` sends per request: the API's most.
const submitBatchChunk = client.SubmitBatchMax

func newJobsSubmitBatchCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "submit-batch --file FILE|-",
		Short: "Submit many jobs from a file, 1000 per request",
		Long: `Submit every job of FILE ("-": standard input) through POST /jobs/submit_batch, 1000 jobs per
request: the fast path for bulk ingest. Each job is what "jobs submit" sends, as JSON:
{"job_id", "type", "agent", "payload", "max_attempts", "timeout"} (job_id, max_attempts and
timeout optional; agent implied by an agent token). FILE holds them as

  {"jobs": [job, ...]}     the body of POST /jobs/submit_batch
  [job, ...]               a JSON array
  job                      JSON Lines: one job per line
  job ...

The whole file is read and checked first: if it is not such a document, or a job has no
payload, a field of the wrong type or an unknown one, nothing is sent (exit code 1, naming the
job and its line).

Each job is then answered on its own: created, exists (its job_id names a job already; nothing
written, so a file of job ids can be sent again safely), or failed (bad input, another agent's
job_id, refused by admission control), each failure named on standard error with the job's
position in the file. Requests are sent one after the other; if one is refused whole or cannot
be sent, orchctl stops there and the jobs from that request on are not submitted (or, after a
5xx or a timeout, their outcome is unknown).

Prints the counts (JOBS, CREATED, EXISTING, FAILED); with -o json the one document is the API's
answer for the whole file: {"results": [...], "created", "existing", "failed"}, the results in
the order of the file. Exit codes: 0 every job created or existing; 1 FILE cannot be read or
is malformed (nothing sent); 2 every job failed, or the first request was refused whole or could
not be sent; 6 some jobs failed or were not sent (each failure named on stderr).`,
		Example: `  orchctl jobs submit-batch --file jobs.jsonl
  jq -c '.[] | {type: "ingest", agent: "etl", payload: .}' docs.json | orchctl jobs submit-batch --file -
  orchctl jobs submit-batch --file batch.json -o json | jq '.results[] | select(.error)'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return g.submitBatch(cmd, file) },
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `read the jobs from FILE, or from standard input when "-"`)
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// submitBatch runs `jobs submit-batch`.
func (g *globals) submitBatch(cmd *cobra.Command, file string) error {
	jobs, err := g.readBatchFile(cmd, file)
	if err != nil {
		return err
	}
	c, err := g.client(cmd)
	if err != nil {
		return err
	}
	b := &batch{stderr: cmd.ErrOrStderr()}
	total := client.SubmitBatchResponse{Results: make([]client.SubmitBatchResult, 0, len(jobs))}
	for start := 0; start < len(jobs); start += submitBatchChunk {
		chunk := jobs[start:min(start+submitBatchChunk, len(jobs))]
		resp, err := c.SubmitBatch(cmd.Context(), client.SubmitBatchRequest{Jobs: chunk})
		if err == nil && len(resp.Results) != len(chunk) {
			err = fmt.Errorf("submit batch of jobs: the answer holds %d results for %d jobs", len(resp.Results), len(chunk))
		}
		if err != nil {
			if start == 0 {
				return err // nothing sent: the API's error, with its hints
			}
			// The jobs that were not sent count as failed; the request is named once.
			b.fail(fmt.Errorf("jobs %d to %d: %w; stopped: jobs %d to %d not submitted",
				start+1, start+len(chunk), err, start+1, len(jobs)))
			b.failed += len(jobs) - start - 1
			break
		}
		for i, r := range resp.Results {
			if r.Error != nil {
				b.fail(batchJobError(start+i+1, r))
			} else {
				b.ok()
			}
		}
		total.Results = append(total.Results, resp.Results...)
		total.Created += resp.Created
		total.Existing += resp.Existing
		total.Failed += resp.Failed
	}
	if g.json() {
		if err := writeJSON(cmd.OutOrStdout(), total); err != nil {
			return err
		}
	} else {
		t := newTable(cmd.OutOrStdout(), "JOBS", "CREATED", "EXISTING", "FAILED")
		t.row(strconv.Itoa(len(jobs)), strconv.Itoa(total.Created), strconv.Itoa(total.Existing),
			strconv.Itoa(len(jobs)-total.Created-total.Existing))
		if err := t.flush(); err != nil {
			return err
		}
	}
	return b.verdict("submit jobs")
}

// batchJobError describes the failed job n (1-based, in the file) of a batch.
func batchJobError(n int, r client.SubmitBatchResult) error {
	who := "job " + strconv.Itoa(n)
	if r.JobID != "" {
		who += " (" + r.JobID + ")"
	}
	msg := fmt.Sprintf("%s: %s: %s", who, r.Error.Code, r.Error.Message)
	if r.Error.Field != "" {
		msg += " (field " + r.Error.Field + ")"
	}
	if r.RetryAfterMS > 0 {
		msg += " (retry after " + (time.Duration(r.RetryAfterMS) * time.Millisecond).String() + ")"
	}
	return errors.New(msg)
}

// readBatchFile reads and checks the jobs of --file ("-": standard input).
func (g *globals) readBatchFile(cmd *cobra.Command, path string) ([]client.SubmitRequest, error) {
	var (
		data []byte
		err  error
	)
	if path == "-" {
		data, err = io.ReadAll(g.stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usageErrorf(cmd, "--file: %w", err)
	}
	name := "--file " + path
	if path == "-" {
		name = "the jobs on standard input"
	}
	jobs, err := parseBatchJobs(data)
	if err != nil {
		return nil, usageErrorf(cmd, "%s: %w", name, err)
	}
	if len(jobs) == 0 {
		return nil, usageErrorf(cmd, "%s holds no jobs", name)
	}
	return jobs, nil
}

// parseBatchJobs decodes the jobs of a batch file: {"jobs": [...]}, a JSON array, or JSON
// Lines. Every job is decoded strictly (no unknown fields); an error names the job and its line.
func parseBatchJobs(data []byte) ([]client.SubmitRequest, error) {
	p := batchParser{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	switch first := p.peek(); {
	case first == 0:
		return nil, nil
	case first == '[':
		if err := p.array(); err != nil {
			return nil, err
		}
	case first == '{' && p.wrapped():
		if err := p.expect(json.Delim('{')); err != nil {
			return nil, err
		}
		key, err := p.dec.Token()
		if err != nil {
			return nil, p.syntax(err)
		}
		if key != "jobs" {
			return nil, fmt.Errorf("line %d: want only \"jobs\" in the object, not %q", p.line(p.dec.InputOffset()), key)
		}
		if err := p.array(); err != nil {
			return nil, err
		}
		if err := p.expect(json.Delim('}')); err != nil {
			return nil, err
		}
	default:
		for p.peek() != 0 {
			if err := p.job(); err != nil {
				return nil, err
			}
		}
	}
	if p.peek() != 0 {
		return nil, fmt.Errorf("line %d: unexpected data after the jobs", p.line(p.dec.InputOffset()))
	}
	return p.jobs, nil
}

// batchParser walks a batch file with a token decoder, so that each job's line is known.
type batchParser struct {
	data []byte
	dec  *json.Decoder
	jobs []client.SubmitRequest
}

// next is the offset of the next value: past white space and, within an array, a comma.
func (p *batchParser) next() int {
	off := int(p.dec.InputOffset())
	for off < len(p.data) && bytes.IndexByte([]byte(" \t\r\n,"), p.data[off]) >= 0 {
		off++
	}
	return off
}

// peek is the first byte of the next value, 0 at the end.
func (p *batchParser) peek() byte {
	if off := p.next(); off < len(p.data) {
		return p.data[off]
	}
	return 0
}

// line is the 1-based line of offset off.
func (p *batchParser) line(off int64) int {
	return 1 + bytes.Count(p.data[:min(int(off), len(p.data))], []byte("\n"))
}

// wrapped reports whether the object that comes next is {"jobs": ...} rather than a job.
func (p *batchParser) wrapped() bool {
	var probe struct {
		Jobs json.RawMessage `json:"jobs"`
	}
	dec := json.NewDecoder(bytes.NewReader(p.data[p.next():]))
	return dec.Decode(&probe) == nil && probe.Jobs != nil
}

// array decodes a JSON array of jobs.
func (p *batchParser) array() error {
	if err := p.expect(json.Delim('[')); err != nil {
		return err
	}
	for p.dec.More() {
		if err := p.job(); err != nil {
			return err
		}
	}
	return p.expect(json.Delim(']'))
}

// job decodes the next job strictly.
func (p *batchParser) job() error {
	n, line := len(p.jobs)+1, p.line(int64(p.next()))
	var raw json.RawMessage
	if err := p.dec.Decode(&raw); err != nil {
		return p.syntax(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var job client.SubmitRequest
	if err := dec.Decode(&job); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "" {
			err = fmt.Errorf("want a JSON object, not %s", typeErr.Value)
		}
		return fmt.Errorf("job %d (line %d): %w", n, line, err)
	}
	if job.Payload == nil {
		// Sent as is, it would be null: the API requires the field, and so does the file.
		return fmt.Errorf("job %d (line %d): \"payload\" is required (any JSON value, null included)", n, line)
	}
	p.jobs = append(p.jobs, job)
	return nil
}

// expect reads the delimiter d.
func (p *batchParser) expect(d json.Delim) error {
	off := p.next()
	tok, err := p.dec.Token()
	if err != nil {
		return p.syntax(err)
	}
	if tok != d {
		return fmt.Errorf("line %d: want %q, not %v", p.line(int64(off)), d, tok)
	}
	return nil
}

// syntax places a decoding error on its line.
func (p *batchParser) syntax(err error) error {
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("line %d: not valid JSON: %w", p.line(syntaxErr.Offset), err)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errors.New("not valid JSON: it ends too early")
	}
	return err
}
