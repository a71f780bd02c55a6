//go:build cgo && !nonvml

package telemetry

import (
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NewNVMLFromLib is the NVML provider over lib (a mock), for the external tests of the package.
func NewNVMLFromLib(lib nvml.Interface, nodeID string) (Provider, error) {
	return newNVMLWith(lib, nodeID, NVMLOptions{Logger: slog.New(slog.DiscardHandler)})
}
