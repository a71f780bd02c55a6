package schedules

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/ident"
)

// JobTemplate is the job a schedule's fires create: the fields of a submit that a schedule
// keeps (schedules.job). What it leaves out takes the type's default when the job is created,
// from the configuration of that moment.
type JobTemplate struct {
	Type    string          `json:"type"`
	Agent   string          `json:"agent"`
	Payload json.RawMessage `json:"payload"`
	// Resources override what the type asks of the GPUs (nil: the type's).
	Resources *TemplateResources `json:"resources,omitempty"`
	// Priority overrides the type's (nil: the type's).
	Priority *int `json:"priority,omitempty"`
	// MaxAttempts overrides the type's attempt budget (0: the type's).
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// TemplateResources are a template's resources (engine.Resources).
type TemplateResources struct {
	GPUMemoryMB int  `json:"gpu_memory_mb,omitempty"`
	GPUs        int  `json:"gpus,omitempty"`
	Exclusive   bool `json:"exclusive,omitempty"`
}

// IDPattern is what a schedule id must match: the API's identifier rule, short enough that the
// job id of a manual fire ("sch-" + id + "-t" + 16 digits) fits a job id's 128 bytes.
var IDPattern = ident.Pattern{Min: 1, Max: 96}

// Actor is the audit actor of what a schedule does by itself: its jobs' job.submitted rows
// and its fires.
func Actor(scheduleID string) string { return engine.ScheduleActorPrefix + scheduleID }

// JobID is the id of the job of a schedule's fire at fireTime: one id per fire time, so that
// a fire made twice (it cannot be: the fire row is unique) would find its job rather than
// make a second one. A cron fire time is a whole second; a manual trigger's is not, and its
// id carries the microseconds.
func JobID(scheduleID string, fireTime time.Time) string {
	if fireTime.Nanosecond() == 0 {
		return engine.ScheduleJobPrefix + scheduleID + "-" + strconv.FormatInt(fireTime.Unix(), 10)
	}
	return engine.ScheduleJobPrefix + scheduleID + "-t" + strconv.FormatInt(fireTime.UnixMicro(), 10)
}

// SubmitParams are the parameters of the job of a fire: the template's, with the fire's job
// id, as actor (for its job.submitted row).
func (t JobTemplate) SubmitParams(jobID, actor string) engine.SubmitParams {
	p := engine.SubmitParams{JobID: jobID, Type: t.Type, Agent: t.Agent, Payload: t.Payload, MaxAttempts: t.MaxAttempts,
		Actor: actor}
	if t.Resources != nil {
		p.Resources = &engine.Resources{GPUMemoryMB: t.Resources.GPUMemoryMB, GPUs: t.Resources.GPUs, Exclusive: t.Resources.Exclusive}
	}
	if t.Priority != nil {
		pr := *t.Priority
		p.Priority = &pr
	}
	return p
}

// templateOf reads a stored template.
func templateOf(raw json.RawMessage) (JobTemplate, error) {
	var t JobTemplate
	if err := json.Unmarshal(raw, &t); err != nil {
		return JobTemplate{}, fmt.Errorf("read the job template: %w", err)
	}
	return t, nil
}
