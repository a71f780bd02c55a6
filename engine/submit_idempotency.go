package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// MismatchError answers a submit whose job_id exists already with another request: a
// resubmit must repeat the request it retries. Field is the first field that differs, in the
// order of the request (type, payload, max_attempts, timeout). It wraps store.ErrConflict.
type MismatchError struct {
	JobID   string
	Field   string
	Message string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("submit job %s: %s: %s", e.JobID, e.Field, e.Message)
}

// Unwrap makes a mismatch a conflict for callers that know no better.
func (e *MismatchError) Unwrap() error { return store.ErrConflict }

// sameRequest checks that r asks for the job that exists (another agent's job is a conflict
// before this). A field the request left out (max_attempts, timeout: the type's default) is
// not compared: the default may have changed since, and the request did not name a value.
// The type compares equal to the type's cpu_fallback either way round: admission may have
// routed one of the two submits and not the other.
func (e *Engine) sameRequest(r *submitReq, job store.Job) error {
	p := r.p
	mismatch := func(field, format string, args ...any) error {
		return &MismatchError{JobID: job.ID, Field: field, Message: fmt.Sprintf(format, args...) +
			"; a resubmit of a job_id must repeat its first request (a new job needs a new job_id)"}
	}
	switch {
	case !e.sameType(job.Type, p.Type):
		return mismatch("type", "the job exists with type %q, not %q", job.Type, p.Type)
	case !SameJSON(job.Payload, p.Payload):
		return mismatch("payload", "the job exists with another payload")
	case r.named.attempts && job.MaxAttempts != p.MaxAttempts:
		return mismatch("max_attempts", "the job exists with max_attempts %d, not %d", job.MaxAttempts, p.MaxAttempts)
	case r.named.timeout && job.Timeout != p.Timeout:
		return mismatch("timeout", "the job exists with timeout %s, not %s", job.Timeout, p.Timeout)
	case r.named.priority && job.Priority != *p.Priority:
		return mismatch("priority", "the job exists with priority %d, not %d", job.Priority, *p.Priority)
	case r.named.resources && ResourcesOf(job) != *p.Resources:
		return mismatch("resources", "the job exists with resources %+v, not %+v", ResourcesOf(job), *p.Resources)
	case r.named.constraints && !reflect.DeepEqual(job.Constraints, p.Constraints):
		return mismatch("constraints", "the job exists with other constraints")
	case job.PoolID != p.PoolID:
		return mismatch("pool_id", "the job exists with pool_id %q, not %q", job.PoolID, p.PoolID)
	case job.ModelID != p.ModelID:
		return mismatch("model_id", "the job exists with model_id %q, not %q", job.ModelID, p.ModelID)
	case job.CallbackURL != p.CallbackURL:
		return mismatch("callback_url", "the job exists with another callback_url")
	}
	return nil
}

// sameType reports whether a job stored with type stored answers a request for asked.
func (e *Engine) sameType(stored, asked string) bool {
	if stored == asked {
		return true
	}
	if jt := e.cfg.JobType(asked); jt != nil && jt.CPUFallback == stored {
		return true
	}
	jt := e.cfg.JobType(stored)
	return jt != nil && jt.CPUFallback == asked
}

// SameJSON reports whether two JSON documents hold the same value: equal bytes, or equal
// once decoded (white space, key order and the spelling of strings aside). Numbers are equal
// when their text is, or when both have at most 15 significant digits and the same float64
// value (1.0 and 1; 15 digits convert to distinct float64s). An empty document is null.
func SameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if len(a) == 0 {
		a = []byte("null")
	}
	if len(b) == 0 {
		b = []byte("null")
	}
	va, errA := decodeNumbers(a)
	vb, errB := decodeNumbers(b)
	if errA != nil || errB != nil {
		return false
	}
	return sameValue(va, vb)
}

func decodeNumbers(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the value")
	}
	return v, nil
}

func sameValue(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !sameValue(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		return ok && sameNumber(string(a), string(b))
	default: // string, bool, nil
		return a == b
	}
}

// sameNumber compares two JSON numbers (see SameJSON).
func sameNumber(a, b string) bool {
	if a == b {
		return true
	}
	if significantDigits(a) > 15 || significantDigits(b) > 15 {
		return false
	}
	fa, errA := strconv.ParseFloat(a, 64)
	fb, errB := strconv.ParseFloat(b, 64)
	return errA == nil && errB == nil && fa == fb
}

// significantDigits counts the digits of a JSON number's mantissa from its first non-zero one
// to its last non-zero one.
func significantDigits(n string) int {
	mantissa, _, _ := strings.Cut(strings.ToLower(n), "e")
	digits := strings.Trim(strings.NewReplacer("-", "", ".", "").Replace(mantissa), "0")
	return len(digits)
}

// named are the optional fields a submit named, recorded before validateSubmit fills in the
// type's defaults: a resubmit of the job's id compares those (sameRequest).
type named struct{ attempts, timeout, resources, priority, constraints bool }

func namedFields(p SubmitParams) named {
	return named{attempts: p.MaxAttempts != 0, timeout: p.Timeout != time.Duration(0), resources: p.Resources != nil,
		priority: p.Priority != nil, constraints: !p.Constraints.Empty()}
}
