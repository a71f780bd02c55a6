package engine

import (
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/store"
)

// Resource limits of one job.
const (
	// MaxGPUsPerJob bounds the GPUs of one node a job may ask for.
	MaxGPUsPerJob = 8
	// MaxGPUMemoryMB bounds the memory a job may ask for on each GPU (4 TiB).
	MaxGPUMemoryMB = 4 << 20
	// MaxPriority is the highest priority.
	MaxPriority = 9
)

// Resources are what a job asks of the GPUs of one node. A submit's resources override its
// type's default (job_types.<type>.gpu_memory_mb on one shared GPU; a CPU type: none); a zero
// field of a submit's resources takes the type's value.
type Resources struct {
	// GPUMemoryMB is the memory the job needs on each of its GPUs; 0: a CPU job.
	GPUMemoryMB int
	// GPUs is how many distinct GPUs of one node it needs: 1 or more for a GPU job, 0 for a
	// CPU job.
	GPUs int
	// Exclusive asks for GPUs that nothing else is placed on while the job holds them.
	Exclusive bool
}

// ResourcesOf are the resources job was submitted with.
func ResourcesOf(job store.Job) Resources {
	return Resources{GPUMemoryMB: job.GPUMemoryMB, GPUs: job.GPUCount(), Exclusive: job.GPUExclusive && job.GPUMemoryMB > 0}
}

// UnsatisfiableError refuses a submit that no node of the cluster could ever run, however idle
// (a GPU larger than any there is, more GPUs than any node has). The API answers 422.
type UnsatisfiableError struct {
	Field   string
	Message string
}

func (e *UnsatisfiableError) Error() string { return e.Field + ": " + e.Message }

// resourcesOf checks a submit's resources (nil: none asked) and returns what the job gets with
// jt's defaults.
func resourcesOf(asked *Resources, jt *config.JobType) (Resources, error) {
	r := Resources{GPUMemoryMB: jt.GPUMemoryMB}
	if asked != nil {
		switch {
		case asked.GPUMemoryMB < 0 || asked.GPUMemoryMB > MaxGPUMemoryMB:
			return r, invalid("resources.gpu_memory_mb", "must be in 1..%d (MB on each GPU)", MaxGPUMemoryMB)
		case asked.GPUs < 0 || asked.GPUs > MaxGPUsPerJob:
			return r, invalid("resources.gpus", "must be in 1..%d (GPUs of one node)", MaxGPUsPerJob)
		}
		if asked.GPUMemoryMB > 0 {
			r.GPUMemoryMB = asked.GPUMemoryMB
		}
		r.GPUs, r.Exclusive = asked.GPUs, asked.Exclusive
	}
	if r.GPUMemoryMB == 0 {
		if r.GPUs > 0 || r.Exclusive {
			return r, invalid("resources.gpu_memory_mb", "is required: type %q needs no GPU, so a request for GPUs must say "+
				"how much memory it needs on each", jt.Name)
		}
		return r, nil
	}
	r.GPUs = max(r.GPUs, 1)
	return r, nil
}
