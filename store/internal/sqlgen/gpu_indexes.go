package sqlgen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuorch/orchestrator/store"
)

// A lease of several GPUs keeps its first in gpu_index and the others in gpu_indexes, a
// comma-separated list ("3,5"): the placement sums read them, and a lease of one GPU (most of
// them) has '' there.

// MoreGPUs is the gpu_indexes column of l: its GPUs after the first.
func MoreGPUs(l store.Lease) string {
	if len(l.GPUIndexes) < 2 {
		return ""
	}
	parts := make([]string, 0, len(l.GPUIndexes)-1)
	for _, i := range l.GPUIndexes[1:] {
		parts = append(parts, strconv.Itoa(i))
	}
	return strings.Join(parts, ",")
}

// GPUIndexes are the GPUs of a lease whose gpu_index is first and whose gpu_indexes is more.
func GPUIndexes(first int, more string) ([]int, error) {
	out := []int{first}
	if more == "" {
		return out, nil
	}
	for p := range strings.SplitSeq(more, ",") {
		i, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("gpu_indexes %q: %w", more, err)
		}
		out = append(out, i)
	}
	return out, nil
}
