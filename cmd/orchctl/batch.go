package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gpuorch/orchestrator/client"
)

// Outcomes of one item of a batch command (leases release, dlq replay, dlq purge, admission set
// --all-agents), as the RESULT column and the "outcome" field of -o json show them.
const (
	outcomeReleased        = "released"
	outcomeAlreadyExpired  = "already_expired"
	outcomeSkippedJobLease = "skipped_job_lease"
	outcomeReplayed        = "replayed"
	outcomePurged          = "purged"
	outcomeSet             = "set"
	outcomeDeleted         = "deleted"
	outcomeFailed          = "failed"
)

// batch counts what a command acting on several items did, and reports each failure on stderr
// as it happens, so that the exit code can say "all", "some" or "none".
type batch struct {
	stderr io.Writer
	done   int
	failed int
}

// ok counts an item that reached the state the operator asked for.
func (b *batch) ok() { b.done++ }

// fail counts an item the API refused (or could not be reached for) and names it on stderr.
func (b *batch) fail(err error) {
	b.failed++
	fmt.Fprintf(b.stderr, "orchctl: %s\n", err)
}

// verdict is the exit of the batch: nil when every item succeeded (or there were none), exit
// code 6 when some did, and the API's exit code 2 when none did.
func (b *batch) verdict(what string) error {
	switch {
	case b.failed == 0:
		return nil
	case b.done > 0:
		return &exitError{code: exitPartial, msg: fmt.Sprintf("%s: %d of %d failed (named above); the others succeeded",
			what, b.failed, b.failed+b.done)}
	}
	return &exitError{code: exitAPI, msg: fmt.Sprintf("%s: every one of %d failed (named above)", what, b.failed)}
}

// abort reports whether err should end the batch at once, before any item succeeded: an auth
// refusal (401, 403) that every other item would get too. report then adds its token hint.
func (b *batch) abort(err error) bool {
	var apiErr *client.APIError
	return b.done == 0 && errors.As(err, &apiErr) &&
		(apiErr.StatusCode == http.StatusUnauthorized || apiErr.StatusCode == http.StatusForbidden)
}

// isAPICode reports whether err is an API answer with the given HTTP status and error code.
func isAPICode(err error, status int, code string) bool {
	var apiErr *client.APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode == status && apiErr.Code == code
}

// errorText is err's message for the "error" field of a batch item in -o json ("" for nil).
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
