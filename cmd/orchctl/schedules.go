package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/client"
)

func newSchedulesCmd(g *globals) *cobra.Command {
	return groupCmd(&cobra.Command{
		Use:   "schedules",
		Short: "Create, list, change, pause and trigger schedules of jobs",
		Long: `Create, inspect, change, pause, trigger and delete schedules (admin token; an agent token
lists and shows its own agent's schedules only).

A schedule submits one job per fire time of its cron expression, read in its time zone: the
leader's firer makes each fire once, whatever fails over (docs/architecture.md, Schedules).
Its rules:

  catch_up        fire times missed by more than schedules.misfire_grace (no leader ran):
                  skip, once (the default: one job for them all) or all (the latest
                  catch_up_max)
  max_concurrent  the most unfinished jobs at once (0: no limit); on_overlap says what a fire
                  does past it: skip, or queue (its job is made when one of them ends)
  require_previous_success
                  a fire is skipped while, or after, the previous job did not end done

Every fire is audited schedule.fired, every skip schedule.skipped ("orchctl jobs events" of a
fire's job shows where it came from).`,
	}, newSchedulesListCmd(g), newSchedulesGetCmd(g), newSchedulesCreateCmd(g), newSchedulesUpdateCmd(g),
		newSchedulesDeleteCmd(g), newSchedulesActionCmd(g, "pause"), newSchedulesActionCmd(g, "resume"),
		newSchedulesTriggerCmd(g))
}

func newSchedulesListCmd(g *globals) *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:   "list [--agent A]",
		Short: "List every schedule with its next run and last fire",
		Long: `List every schedule (GET /schedules, every page): its cron and zone, the agent and type of its
jobs, whether it is paused, its next run, and its last fire with the status of its job.

With -o json the one document is {"schedules": [...]}.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := g.schedules(cmd.Context(), cmd, agent)
			switch {
			case err != nil:
				return err
			case g.json():
				return writeJSON(cmd.OutOrStdout(), client.ScheduleList{Schedules: all})
			case len(all) == 0:
				fmt.Fprintln(cmd.ErrOrStderr(), "no schedules")
				return nil
			}
			t := newTable(cmd.OutOrStdout(), "SCHEDULE", "CRON", "TIMEZONE", "AGENT", "TYPE", "STATE", "NEXT RUN", "LAST FIRE",
				"LAST JOB")
			for _, s := range all {
				next, last, job := "-", "-", "-"
				if len(s.NextRuns) > 0 {
					next = s.NextRuns[0]
				}
				if f := s.LastFire; f != nil {
					last, job = f.FireTime, f.JobID+" ("+f.JobStatus+")"
				}
				t.row(s.ID, s.Cron, s.Timezone, s.Job.Agent, s.Job.Type, scheduleState(s), next, last, job)
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's schedules")
	return cmd
}

// schedules reads every page of schedules (never nil).
func (g *globals) schedules(ctx context.Context, cmd *cobra.Command, agent string) ([]client.Schedule, error) {
	c, err := g.client(cmd)
	if err != nil {
		return nil, err
	}
	all := []client.Schedule{}
	p := client.ScheduleListParams{Agent: agent}
	for {
		page, err := c.ListSchedules(ctx, p)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Schedules...)
		if page.NextAfter == "" {
			return all, nil
		}
		p.After = page.NextAfter
	}
}

// scheduleState is paused or active.
func scheduleState(s client.Schedule) string {
	if s.Paused {
		return "paused"
	}
	return "active"
}

// scheduleIDs lists the schedules' ids, for completion.
func scheduleIDs(ctx context.Context, g *globals, cmd *cobra.Command) ([]string, error) {
	all, err := g.schedules(ctx, cmd, "")
	return idsOf(all, func(s client.Schedule) string { return s.ID }), err
}

func newSchedulesGetCmd(g *globals) *cobra.Command {
	return objectCmd(g, "get SCHEDULE", "Show one schedule: its rules, job, next runs and last fire",
		`Show one schedule (GET /schedules/{id}): its cron and zone, its rules, its job template, its
next 5 fire times (in its zone), its last fire and the status of that fire's job, its last
skipped fire and why (overlap, queue_full, previous_running, previous_failed, invalid_job), and
how many of its jobs are unfinished (RUNNING) and how many fires wait for one to end (QUEUED).

With -o json the one document is the schedule.`, scheduleIDs, onID(g, (*client.Client).GetSchedule, g.printSchedule))
}

// printSchedule prints a schedule's fields, or the schedule as JSON with -o json.
func (g *globals) printSchedule(cmd *cobra.Command, s client.Schedule) error {
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), s)
	}
	last := "-"
	if f := s.LastFire; f != nil {
		last = f.FireTime + "  " + f.JobID + " (" + f.JobStatus + ")"
	}
	skip := "-"
	if k := s.LastSkip; k != nil {
		skip = k.FireTime + "  " + k.Reason
	}
	res := "-"
	if r := s.Job.Resources; r != nil {
		res = fmt.Sprintf("gpu_memory_mb=%d gpus=%d exclusive=%t", r.GPUMemoryMB, r.GPUs, r.Exclusive)
	}
	t := newTable(cmd.OutOrStdout())
	for _, kv := range [][2]string{
		{"SCHEDULE", s.ID},
		{"CRON", s.Cron},
		{"TIMEZONE", s.Timezone},
		{"STATE", scheduleState(s)},
		{"AGENT", s.Job.Agent},
		{"TYPE", s.Job.Type},
		{"PAYLOAD", fmtRaw(s.Job.Payload, maxFieldValue)},
		{"RESOURCES", res},
		{"PRIORITY", optInt(s.Job.Priority)},
		{"MAX ATTEMPTS", optInt(s.Job.MaxAttempts)},
		{"CATCH UP", s.CatchUp + " (max " + strconv.Itoa(s.CatchUpMax) + ")"},
		{"MAX CONCURRENT", strconv.Itoa(s.MaxConcurrent) + " (on overlap: " + s.OnOverlap + ")"},
		{"PREVIOUS SUCCESS", strconv.FormatBool(s.RequirePreviousSuccess)},
		{"RUNNING", strconv.Itoa(s.Running)},
		{"QUEUED", strconv.Itoa(s.Queued)},
		{"LAST FIRE", last},
		{"LAST SKIP", skip},
		{"NEXT RUNS", orDash(strings.Join(s.NextRuns, ", "))},
		{"CREATED", fmtTime(s.CreatedAt, g.now()) + " by " + orDash(s.CreatedBy)},
	} {
		t.row(kv[0], kv[1])
	}
	return t.flush()
}

// optInt shows an optional number, "-" (the type's default) when absent.
func optInt(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

// scheduleFlags are the flags of `schedules create` and `schedules update`.
type scheduleFlags struct {
	cron, timezone, catchUp, onOverlap               string
	catchUpMax, maxConcurrent, priority, maxAttempts int
	requirePrevious, paused                          bool
	jobType, agent                                   string
	payload                                          submitFlags // its payload and payloadFile
	gpuMemoryMB, gpus                                int
	exclusive                                        bool
}

// jobFlags are the flags that change the job template.
var jobFlags = []string{"type", "agent", "payload", "payload-file", "priority", "max-attempts", "gpu-memory-mb", "gpus",
	"exclusive"}

func (f *scheduleFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.cron, "cron", "", `the schedule: "*/5 * * * *", 6 fields with seconds first, "@every 30s", "@daily"…`)
	fl.StringVar(&f.timezone, "timezone", "", "the IANA zone the cron is read in (default UTC)")
	fl.StringVar(&f.catchUp, "catch-up", "", "missed fire times: skip, once (default) or all")
	fl.IntVar(&f.catchUpMax, "catch-up-max", 0, "with --catch-up all: the most missed fire times made (default 100)")
	fl.IntVar(&f.maxConcurrent, "max-concurrent", 0, "the most unfinished jobs at once (0: no limit)")
	fl.StringVar(&f.onOverlap, "on-overlap", "", "past --max-concurrent: skip (default) or queue")
	fl.BoolVar(&f.requirePrevious, "require-previous-success", false, "skip a fire unless the previous job ended done")
	fl.BoolVar(&f.paused, "paused", false, "paused: nothing fires until resumed")
	fl.StringVar(&f.jobType, "type", "", "the job type")
	fl.StringVar(&f.agent, "agent", "", "the agent the jobs run as")
	fl.StringVar(&f.payload.payload, "payload", "", "the payload as inline JSON (default {})")
	fl.StringVar(&f.payload.payloadFile, "payload-file", "", "read the payload from FILE, or from standard input when -")
	fl.IntVar(&f.priority, "priority", 0, "the jobs' priority, 0..9 (default: the type's)")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "the jobs' attempt budget (default: the type's)")
	fl.IntVar(&f.gpuMemoryMB, "gpu-memory-mb", 0, "GPU memory each job needs on each of its GPUs")
	fl.IntVar(&f.gpus, "gpus", 0, "GPUs of one node each job needs")
	fl.BoolVar(&f.exclusive, "exclusive", false, "hold the GPUs alone")
	cmd.MarkFlagsMutuallyExclusive("payload", "payload-file")
}

// request is the body of the flags that were given; job starts from the schedule's template
// (an update) and takes the job flags given, and goes in the body when any was.
func (f *scheduleFlags) request(cmd *cobra.Command, g *globals, job client.ScheduleJob) (client.ScheduleRequest, error) {
	var req client.ScheduleRequest
	changed := cmd.Flags().Changed
	str := func(name string, v string, dst **string) {
		if changed(name) {
			*dst = &v
		}
	}
	num := func(name string, v int, dst **int) {
		if changed(name) {
			*dst = &v
		}
	}
	flag := func(name string, v bool, dst **bool) {
		if changed(name) {
			*dst = &v
		}
	}
	str("cron", f.cron, &req.Cron)
	str("timezone", f.timezone, &req.Timezone)
	str("catch-up", f.catchUp, &req.CatchUp)
	str("on-overlap", f.onOverlap, &req.OnOverlap)
	num("catch-up-max", f.catchUpMax, &req.CatchUpMax)
	num("max-concurrent", f.maxConcurrent, &req.MaxConcurrent)
	flag("require-previous-success", f.requirePrevious, &req.RequirePreviousSuccess)
	flag("paused", f.paused, &req.Paused)
	touched := false
	for _, name := range jobFlags {
		touched = touched || changed(name)
	}
	if !touched {
		return req, nil
	}
	if changed("type") {
		job.Type = f.jobType
	}
	if changed("agent") {
		job.Agent = f.agent
	}
	if changed("payload") || changed("payload-file") || job.Payload == nil {
		p, err := g.readPayload(cmd, &f.payload)
		if err != nil {
			return req, err
		}
		job.Payload = p
	}
	num("priority", f.priority, &job.Priority)
	num("max-attempts", f.maxAttempts, &job.MaxAttempts)
	if changed("gpu-memory-mb") || changed("gpus") || changed("exclusive") {
		r := client.Resources{}
		if job.Resources != nil {
			r = *job.Resources
		}
		if changed("gpu-memory-mb") {
			r.GPUMemoryMB = f.gpuMemoryMB
		}
		if changed("gpus") {
			r.GPUs = f.gpus
		}
		if changed("exclusive") {
			r.Exclusive = f.exclusive
		}
		job.Resources = &r
	}
	req.Job = &job
	return req, nil
}

func newSchedulesCreateCmd(g *globals) *cobra.Command {
	var f scheduleFlags
	cmd := &cobra.Command{
		Use:   "create SCHEDULE --cron C --type T --agent A [--payload JSON | --payload-file F] [flags]",
		Short: "Create a schedule",
		Long: `Create a schedule (POST /schedules): from now on, each fire time of --cron in --timezone submits
a job of --type for --agent with the payload, checked now as a submit is. The first fire is
the first fire time after now. Prints the schedule as "schedules get" does.`,
		Example: `  orchctl schedules create nightly-report --cron "30 2 * * *" --timezone Europe/Berlin --type report --agent ops \
      --payload '{"scope": "all"}' --max-concurrent 1 --on-overlap queue
  orchctl schedules create heartbeat --cron "@every 30s" --type noop --agent ops --catch-up skip`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := f.request(cmd, g, client.ScheduleJob{})
			if err != nil {
				return err
			}
			req.ID = args[0]
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			s, err := c.CreateSchedule(cmd.Context(), req)
			if err != nil {
				return err
			}
			return g.printSchedule(cmd, s)
		},
	}
	f.register(cmd)
	for _, name := range []string{"cron", "type", "agent"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func newSchedulesUpdateCmd(g *globals) *cobra.Command {
	var f scheduleFlags
	cmd := &cobra.Command{
		Use:   "update SCHEDULE [flags]",
		Short: "Change a schedule's cron, rules or job",
		Long: `Change the fields the flags name (PATCH /schedules/{id}); the job flags change the schedule's job
template and keep the rest of it. A new cron or zone starts the schedule again from now: the
fire times passed meanwhile are not caught up.`,
		Example: `  orchctl schedules update nightly-report --cron "0 3 * * *"
  orchctl schedules update heartbeat --payload '{"deep": true}' --max-concurrent 2`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeFromAPI(g, 1, scheduleIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			cur, err := c.GetSchedule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			req, err := f.request(cmd, g, cur.Job)
			if err != nil {
				return err
			}
			s, err := c.UpdateSchedule(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return g.printSchedule(cmd, s)
		},
	}
	f.register(cmd)
	return cmd
}

func newSchedulesDeleteCmd(g *globals) *cobra.Command {
	return objectCmd(g, "delete SCHEDULE", "Delete a schedule; the jobs it made stay",
		`Delete a schedule and the record of its fires (DELETE /schedules/{id}): nothing fires any more,
its queued fires are dropped, and the jobs it made stay as they are ("orchctl jobs cancel" stops
one). Audited schedule.deleted.`, scheduleIDs, onDelete(g, "schedule", (*client.Client).DeleteSchedule))
}

// newSchedulesActionCmd is `schedules pause` or `schedules resume`.
func newSchedulesActionCmd(g *globals, action string) *cobra.Command {
	short, long := "Stop a schedule's fires until it is resumed",
		"Pause a schedule (POST /schedules/{id}/pause): nothing fires until it is resumed. Its queued fires\nwait, its jobs in flight go on, and a manual trigger still fires. Audited schedule.paused."
	set := (*client.Client).PauseSchedule
	if action == "resume" {
		set = (*client.Client).ResumeSchedule
		short, long = "Fire a paused schedule again, from now on",
			"Resume a schedule (POST /schedules/{id}/resume): it fires again from the first fire time after now;\nthe fire times it passed paused are not caught up, whatever its catch_up. Audited schedule.resumed."
	}
	return &cobra.Command{
		Use:               action + " SCHEDULE",
		Short:             short,
		Long:              long,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeFromAPI(g, 1, scheduleIDs),
		RunE:              onID(g, set, g.printSchedule),
	}
}

func newSchedulesTriggerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "trigger SCHEDULE",
		Short: "Fire a schedule now, whatever its rules and even paused",
		Long: `Fire a schedule once, now (POST /schedules/{id}/trigger): its job is submitted at once, whatever
max_concurrent and require_previous_success say, and even while the schedule is paused. The
fire counts as the schedule's last. Prints the fire time and the job's id.

With -o json the one document is the API's answer {"schedule_id", "fire_time", "job_id",
"job_status"}.`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeFromAPI(g, 1, scheduleIDs),
		RunE: onID(g, (*client.Client).TriggerSchedule, func(cmd *cobra.Command, f client.ScheduleFire) error {
			t := newTable(cmd.OutOrStdout(), "SCHEDULE", "FIRE TIME", "JOB", "STATUS")
			t.row(f.ScheduleID, f.FireTime, f.JobID, f.JobStatus)
			return t.flush()
		}),
	}
}
