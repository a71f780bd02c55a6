package leases

import (
	"errors"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// Reasons a lease is denied (DenialError.Reason; the API's 409 error codes).
const (
	// ReasonNoCapacity: the node's GPUs are known and fresh, but none has the memory free.
	ReasonNoCapacity = "no_capacity"
	// ReasonNodeUnknown: no telemetry was ever recorded for the node (or it has no GPU).
	ReasonNodeUnknown = "node_unknown"
	// ReasonTelemetryStale: the node's telemetry is older than the freshness window, so what is
	// free there is not known.
	ReasonTelemetryStale = "telemetry_stale"
)

// DenialError is a lease that cannot be granted now. It is not a failure of the orchestrator:
// the API answers 409 with Reason as the code, and a claim leaves the job pending.
type DenialError struct {
	Reason  string
	NodeID  string
	Message string
}

func (e *DenialError) Error() string { return e.Reason + ": " + e.Message }

func deny(reason, nodeID, format string, args ...any) *DenialError {
	return &DenialError{Reason: reason, NodeID: nodeID, Message: fmt.Sprintf(format, args...)}
}

// IsDenial returns the DenialError in err's chain.
func IsDenial(err error) (*DenialError, bool) {
	var d *DenialError
	ok := errors.As(err, &d)
	return d, ok
}

// GoneError is a lease that has ended (released or expired): it can be neither renewed nor
// released again, and never comes back. The API answers 410.
type GoneError struct {
	Token  string
	Status store.LeaseStatus // released or expired, or active past its expiry (not yet purged)
}

func (e *GoneError) Error() string {
	if e.Status == store.LeaseActive {
		return "lease has expired (its holder missed its heartbeats)"
	}
	return "lease is " + string(e.Status)
}

// ErrBoundToJob is returned when an agent or an operator tries to release a job's lease: the
// job would keep running without one. Cancel the job instead, which releases it.
var ErrBoundToJob = errors.New("the lease belongs to a job: cancel the job to release it")

// ErrNotFound is an unknown token (or one outside the caller's agent scope). It wraps
// store.ErrNotFound, so the API answers 404.
var ErrNotFound = fmt.Errorf("lease not found: %w", store.ErrNotFound)
