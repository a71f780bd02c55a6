//go:build !cgo || nonvml

package telemetry

import "fmt"

// NewNVML always fails with ErrNVMLUnavailable in this build: go-nvml needs cgo, and the binary
// was built with CGO_ENABLED=0 or with the nonvml tag. Auto then falls back to the simulated or
// the None provider, so a pure-Go build still runs everywhere.
func NewNVML(nodeID string, opts NVMLOptions) (Provider, error) {
	return nil, fmt.Errorf("load nvml: built without cgo or with the nonvml tag: %w", ErrNVMLUnavailable)
}
