package nodelabels

import "strings"

// The keys of the labels the orchestrator derives from a node's telemetry.
const (
	// KeyProduct is the NVML product name of the node's largest GPU, made a label value
	// ("NVIDIA A100-SXM4-40GB" → "NVIDIA-A100-SXM4-40GB").
	KeyProduct = AutoPrefix + "product"
	// KeyMemoryMB is the total memory of the node's largest GPU, in MiB.
	KeyMemoryMB = AutoPrefix + "memory_mb"
	// KeyCount is how many usable GPUs the node reported.
	KeyCount = AutoPrefix + "count"
	// KeyDriver is the driver version (NVML; "sim" for simulated GPUs).
	KeyDriver = AutoPrefix + "driver"
	// KeyCUDA is the CUDA version the driver supports ("12.4").
	KeyCUDA = AutoPrefix + "cuda"
	// KeyMIG is "enabled" when any GPU of the node runs in MIG mode, "disabled" when the
	// mode was read and none does; absent when it could not be read.
	KeyMIG = AutoPrefix + "mig"
)

// AsValue makes s a label value: every byte a value may not hold becomes '-', runs of them
// one, and the result is cut to Value.Max; "" when nothing is left.
func AsValue(s string) string {
	var b strings.Builder
	dash := false
	for i := range len(s) {
		c := s[i]
		if Value.MatchString(string(c)) || c == '.' {
			b.WriteByte(c)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	v := strings.Trim(b.String(), "-")
	if len(v) > Value.Max {
		v = v[:Value.Max]
	}
	if !Value.MatchString(v) {
		return ""
	}
	return v
}
