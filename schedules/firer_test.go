package schedules_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/metrics/metricstest"
	"github.com/gpuorch/orchestrator/schedules"
	"github.com/gpuorch/orchestrator/store"
)

// TestFirerFiresEachFireTimeOnce: every fire time between the cursor and now makes one job,
// with the fire's deterministic id, its fire row and its schedule.fired row; the jobs are
// published. A second pass, or a second firer (a leader that took over), makes nothing again.
func TestFirerFiresEachFireTimeOnce(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		v := b.create(t, spec("every10", "@every 10s"))
		require.Equal(t, at(10*time.Second), *v.NextFireAt)
		require.Len(t, v.NextRuns, schedules.NextRunsShown)

		b.clock.Set(at(35 * time.Second))
		res := b.pass(t)
		require.Len(t, res.Fired, 3)
		require.Equal(t, 1, res.Schedules)
		want := []time.Time{at(10 * time.Second), at(20 * time.Second), at(30 * time.Second)}
		require.Equal(t, want, b.firedAt(t, "every10"))
		for i, f := range res.Fired {
			require.Equal(t, want[i], f.FireTime)
			require.Equal(t, schedules.JobID("every10", want[i]), f.JobID)
			require.Equal(t, schedules.ReasonDue, f.Reason)
			require.Equal(t, at(35*time.Second).Sub(want[i]), f.Lag, "made at the clock's now")
		}
		require.Equal(t, at(36*time.Second), res.NextWake, "the next fire time (10:00:40) is further than an interval")
		jobs := b.jobs(t)
		require.Len(t, jobs, 3)
		for _, j := range jobs {
			require.Equal(t, store.JobPending, j.Status)
			require.Equal(t, "noop", j.Type)
			require.JSONEq(t, `{"from":"every10"}`, string(j.Payload))
		}
		fired := b.audit(t, schedules.EventFired, "every10")
		require.Len(t, fired, 3)
		require.Equal(t, map[string]any{"schedule_id": "every10", "fire_time": "2026-05-04T10:00:10Z", "reason": "due",
			"job_id": "sch-every10-1777888810", "actor": "leader", "row_job_id": "sch-every10-1777888810"}, fired[0])
		// The job's own trail says where it came from.
		evs, err := b.st.AuditList(ctx, store.AuditListParams{JobID: "sch-every10-1777888810"})
		require.NoError(t, err)
		require.Equal(t, "job.submitted", evs[0].EventType)
		require.Equal(t, "schedule:every10", evs[0].Actor)
		b.eng.FlushMarks(ctx)
		n, err := b.sc.Len(ctx, b.cfg.JobTypes["noop"].Stream)
		require.NoError(t, err)
		require.EqualValues(t, 3, n, "published like submitted jobs")

		// Nothing is due again: neither this firer nor another makes a fire twice.
		require.Empty(t, b.pass(t).Fired)
		other := b.newFirer(nil)
		res, err = other.RunOnce(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Fired)
		require.Len(t, b.jobs(t), 3)

		b.clock.Set(at(40 * time.Second))
		require.Len(t, b.pass(t).Fired, 1)
		require.Len(t, b.jobs(t), 4)

		fams := metricstest.Gather(t, b.reg)
		require.EqualValues(t, 4, metricstest.Value(t, fams, "gpu_orchestrator_schedule_fires_total", map[string]string{"schedule": "every10"}))
		require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_schedule_skips_total", map[string]string{"reason": "overlap"}))
	})
}

// TestFirerFenced: a firer whose term is no longer current makes nothing: the fire rows, the
// jobs and the cursor all stay as they were.
func TestFirerFenced(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		old, err := b.st.LeaderAcquire(ctx, "a", b.clock.Now())
		require.NoError(t, err)
		_, err = b.st.LeaderAcquire(ctx, "b", b.clock.Now())
		require.NoError(t, err)
		b.create(t, spec("fenced", "@every 10s"))
		b.clock.Set(at(25 * time.Second))
		stale := b.newFirer(func(ctx context.Context, tx store.Tx) error { return tx.LeaderCheckTerm(ctx, old) })
		_, err = stale.RunOnce(ctx)
		require.ErrorIs(t, err, store.ErrFenced)
		require.Empty(t, b.fires(t, "fenced"))
		require.Empty(t, b.jobs(t))
		v, err := b.svc.Get(ctx, "fenced")
		require.NoError(t, err)
		require.Equal(t, at(10*time.Second), *v.NextFireAt, "the cursor did not move")

		current := b.newFirer(func(ctx context.Context, tx store.Tx) error { return tx.LeaderCheckTerm(ctx, old+1) })
		res, err := current.RunOnce(ctx)
		require.NoError(t, err)
		require.Len(t, res.Fired, 2)
	})
}

// TestFirerCatchUp: an every-minute schedule whose firer did not run for 10.5 minutes (grace
// 1 minute): 10:10 is on time, 10:01..10:09 were missed, and catch_up says what becomes of them.
func TestFirerCatchUp(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		minute := func(m int) time.Time { return at(time.Duration(m) * time.Minute) }
		cases := []struct {
			catchUp string
			max     int
			fired   []time.Time
			skipped map[string]any // the schedule.skipped row of the dropped ones (nil: none)
		}{
			{schedules.CatchUpSkip, 0, []time.Time{minute(10)},
				map[string]any{"reason": "missed", "count": 9.0, "fire_time": "2026-05-04T10:01:00Z", "last_fire_time": "2026-05-04T10:09:00Z"}},
			{schedules.CatchUpOnce, 0, []time.Time{minute(9), minute(10)},
				map[string]any{"reason": "missed", "count": 8.0, "fire_time": "2026-05-04T10:01:00Z", "last_fire_time": "2026-05-04T10:08:00Z"}},
			{schedules.CatchUpAll, 3, []time.Time{minute(7), minute(8), minute(9), minute(10)},
				map[string]any{"reason": "catch_up_max", "count": 6.0, "fire_time": "2026-05-04T10:01:00Z", "last_fire_time": "2026-05-04T10:06:00Z"}},
			{schedules.CatchUpAll, 100, []time.Time{minute(1), minute(2), minute(3), minute(4), minute(5), minute(6), minute(7),
				minute(8), minute(9), minute(10)}, nil},
		}
		idOf := func(catchUp string, limit int) string { return fmt.Sprintf("catchup-%s-%d", catchUp, limit) }
		for _, tc := range cases {
			sp := spec(idOf(tc.catchUp, tc.max), "* * * * *")
			sp.CatchUp, sp.CatchUpMax = tc.catchUp, tc.max
			b.create(t, sp)
		}
		b.clock.Set(at(10*time.Minute + 30*time.Second))
		b.pass(t)
		for _, tc := range cases {
			id := idOf(tc.catchUp, tc.max)
			t.Run(id, func(t *testing.T) {
				require.Equal(t, tc.fired, b.firedAt(t, id))
				reasons := b.audit(t, schedules.EventFired, id)
				require.Equal(t, "due", reasons[len(reasons)-1]["reason"])
				if len(reasons) > 1 {
					require.Equal(t, "catch_up", reasons[0]["reason"])
				}
				skipped := b.audit(t, schedules.EventSkipped, id)
				if tc.skipped == nil {
					require.Empty(t, skipped)
					return
				}
				require.Len(t, skipped, 1, "one row for the dropped fire times")
				for k, v := range tc.skipped {
					require.Equal(t, v, skipped[0][k], k)
				}
			})
		}
		fams := metricstest.Gather(t, b.reg)
		require.EqualValues(t, 9+8, metricstest.Value(t, fams, "gpu_orchestrator_schedule_skips_total", map[string]string{"reason": "missed"}))
		require.EqualValues(t, 6, metricstest.Value(t, fams, "gpu_orchestrator_schedule_skips_total", map[string]string{"reason": "catch_up_max"}))
	})
}

// TestFirerOverlapSkip: max_concurrent 1, on_overlap skip: a fire while the previous job is
// unfinished is skipped (a skipped fire row and a schedule.skipped row), and fires again once
// it ended.
func TestFirerOverlapSkip(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		sp := spec("overlap", "@every 10s")
		sp.MaxConcurrent = 1
		b.create(t, sp)
		b.clock.Set(at(10 * time.Second))
		require.Len(t, b.pass(t).Fired, 1)
		b.clock.Set(at(20 * time.Second))
		res := b.pass(t)
		require.Empty(t, res.Fired)
		require.Equal(t, map[string]int{schedules.SkipOverlap: 1}, res.Skipped)
		fs := b.fires(t, "overlap")
		require.Len(t, fs, 2)
		require.Equal(t, store.FireSkipped, fs[1].State)
		require.Equal(t, schedules.SkipOverlap, fs[1].Reason)
		skipped := b.audit(t, schedules.EventSkipped, "overlap")
		require.Len(t, skipped, 1)
		require.Equal(t, "2026-05-04T10:00:20Z", skipped[0]["fire_time"])
		require.Equal(t, "overlap", skipped[0]["reason"])
		require.Empty(t, skipped[0]["row_job_id"])
		v, err := b.svc.Get(context.Background(), "overlap")
		require.NoError(t, err)
		require.Equal(t, schedules.SkipOverlap, v.LastSkip.Reason)
		require.Equal(t, at(20*time.Second), v.LastSkip.FireTime)
		require.Equal(t, 1, v.Running)

		b.end(t, schedules.JobID("overlap", at(10*time.Second)), store.JobDone)
		b.clock.Set(at(30 * time.Second))
		res = b.pass(t)
		require.Len(t, res.Fired, 1, "the job ended: the next fire goes")
		require.Equal(t, at(30*time.Second), res.Fired[0].FireTime)
		require.Equal(t, store.FireEnded, b.fires(t, "overlap")[0].State)
		require.Equal(t, "done", b.fires(t, "overlap")[0].JobStatus)
	})
}

// TestFirerOverlapQueue: max_concurrent 1, on_overlap queue, max_queued 2: fires past the
// limit wait as queued fires (their jobs not made), the third is skipped as queue_full, and
// each time a job ends the oldest queued fire makes its job, with its own fire time's id.
func TestFirerOverlapQueue(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		b.cfg.Schedules.MaxQueued = 2
		b.firer = b.newFirer(nil)
		sp := spec("queue", "@every 10s")
		sp.MaxConcurrent, sp.OnOverlap = 1, schedules.OverlapQueue
		v := b.create(t, sp)
		require.Equal(t, schedules.OverlapQueue, v.Spec.OnOverlap)
		b.clock.Set(at(40 * time.Second))
		res := b.pass(t)
		require.Len(t, res.Fired, 1)
		require.Equal(t, 2, res.Queued)
		require.Equal(t, map[string]int{schedules.SkipQueueFull: 1}, res.Skipped)
		states := func() []store.FireState {
			var out []store.FireState
			for _, f := range b.fires(t, "queue") {
				out = append(out, f.State)
			}
			return out
		}
		require.Equal(t, []store.FireState{store.FireRunning, store.FireQueued, store.FireQueued, store.FireSkipped}, states())
		require.Len(t, b.jobs(t), 1)
		v, err := b.svc.Get(context.Background(), "queue")
		require.NoError(t, err)
		require.Equal(t, 1, v.Running)
		require.Equal(t, 2, v.Queued)

		// Nothing ended: the queue waits, and the next fire (10:00:50) finds it full.
		b.clock.Set(at(50 * time.Second))
		res = b.pass(t)
		require.Empty(t, res.Fired)
		require.Equal(t, map[string]int{schedules.SkipQueueFull: 1}, res.Skipped)

		b.end(t, schedules.JobID("queue", at(10*time.Second)), store.JobDone)
		b.clock.Add(time.Second) // not a fire time: only the queue moves
		res = b.pass(t)
		require.Len(t, res.Fired, 1)
		require.Equal(t, at(20*time.Second), res.Fired[0].FireTime, "the oldest queued fire")
		require.Equal(t, schedules.ReasonDequeued, res.Fired[0].Reason)
		require.Equal(t, time.Second*31, res.Fired[0].Lag)
		_, err = b.st.JobGet(context.Background(), schedules.JobID("queue", at(20*time.Second)))
		require.NoError(t, err, "its job has its fire time's id")

		b.end(t, schedules.JobID("queue", at(20*time.Second)), store.JobCancelled)
		res = b.pass(t)
		require.Len(t, res.Fired, 1)
		require.Equal(t, at(30*time.Second), res.Fired[0].FireTime)
		require.Equal(t, []store.FireState{store.FireEnded, store.FireEnded, store.FireRunning, store.FireSkipped, store.FireSkipped},
			states())
	})
}

// TestFirerRequirePreviousSuccess: while the previous job runs, a fire waits as an overlap does
// (skipped as previous_running under skip); after it ends done the next fires; after one that
// did not end done every fire is skipped (previous_failed) until a manual trigger's job ends
// done.
func TestFirerRequirePreviousSuccess(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		sp := spec("chain", "@every 10s")
		sp.RequirePreviousSuccess = true
		b.create(t, sp)
		fire := func(s int) []schedules.Fired {
			b.clock.Set(at(time.Duration(s) * time.Second))
			return b.pass(t).Fired
		}
		require.Len(t, fire(10), 1, "no previous fire")
		require.Empty(t, fire(20), "the previous job is unfinished")
		require.Equal(t, schedules.SkipPreviousRunning, b.fires(t, "chain")[1].Reason)
		b.end(t, schedules.JobID("chain", at(10*time.Second)), store.JobDone)
		require.Len(t, fire(30), 1, "the previous job ended done")
		b.end(t, schedules.JobID("chain", at(30*time.Second)), store.JobDeadLetter)
		require.Empty(t, fire(40))
		require.Empty(t, fire(50))
		skipped := b.audit(t, schedules.EventSkipped, "chain")
		require.Len(t, skipped, 3)
		require.Equal(t, "previous_failed", skipped[2]["reason"])
		require.Equal(t, "sch-chain-1777888830", skipped[2]["previous_job_id"])

		trig, err := b.svc.Trigger(ctx, "chain", "admin")
		require.NoError(t, err)
		require.Equal(t, schedules.ReasonTrigger, trig.Reason)
		b.end(t, trig.JobID, store.JobDone)
		require.Len(t, fire(60), 1, "the trigger's job ended done")
	})
}

// TestFirerPauseResume: a paused schedule does not fire; resumed, it starts again from now
// without catching up the fire times it passed paused.
func TestFirerPauseResume(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		sp := spec("pausing", "@every 10s")
		sp.CatchUp = schedules.CatchUpAll
		b.create(t, sp)
		v, err := b.svc.SetPaused(ctx, "pausing", true, "admin")
		require.NoError(t, err)
		require.True(t, v.Paused)
		require.Empty(t, v.NextRuns, "a paused schedule has no next runs")
		b.clock.Set(at(5 * time.Minute))
		require.Empty(t, b.pass(t).Fired)

		v, err = b.svc.SetPaused(ctx, "pausing", false, "admin")
		require.NoError(t, err)
		require.Equal(t, at(5*time.Minute+10*time.Second), *v.NextFireAt)
		b.clock.Add(10 * time.Second)
		res := b.pass(t)
		require.Len(t, res.Fired, 1)
		require.Equal(t, at(5*time.Minute+10*time.Second), res.Fired[0].FireTime)
		require.Len(t, b.audit(t, schedules.EventPaused, "pausing"), 1)
		require.Len(t, b.audit(t, schedules.EventResumed, "pausing"), 1)
	})
}

// TestFirerInvalidJob: a template that is no longer a valid submit when its fire comes (its
// type was removed from the configuration) skips the fire as invalid_job, saying why.
func TestFirerInvalidJob(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		sp := spec("orphan", "@every 10s")
		sp.Job.Type = "sleep"
		b.create(t, sp)
		delete(b.cfg.JobTypes, "sleep")
		b.clock.Set(at(10 * time.Second))
		res := b.pass(t)
		require.Empty(t, res.Fired)
		require.Equal(t, map[string]int{schedules.SkipInvalidJob: 1}, res.Skipped)
		skipped := b.audit(t, schedules.EventSkipped, "orphan")
		require.Len(t, skipped, 1)
		require.Contains(t, skipped[0]["message"], "unknown job type")
		_, err := b.svc.Trigger(context.Background(), "orphan", "admin")
		var valErr *engine.ValidationError
		require.True(t, errors.As(err, &valErr), "a trigger answers the refusal: %v", err)
		require.Equal(t, "job.type", valErr.Field)
	})
}

// TestFirerDaylightSaving: a daily 01:30 and a daily 02:30 in America/New_York, fired pass by
// pass every 5 minutes of the injected clock across both changes of 2026: on the fall-back
// night 01:30 fires once (not at 01:30 EST again), and on the spring-forward night 02:30,
// which does not exist, does not fire.
func TestFirerDaylightSaving(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		for _, night := range []struct {
			name     string
			from, to time.Time
			want     map[string][]string
		}{
			{"FallBack", time.Date(2026, 10, 31, 4, 0, 0, 0, time.UTC), time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC),
				map[string][]string{
					"fall-0130": {"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
					"fall-0230": {"2026-10-31T06:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z"}}},
			{"SpringForward", time.Date(2026, 3, 7, 4, 0, 0, 0, time.UTC), time.Date(2026, 3, 9, 9, 0, 0, 0, time.UTC),
				map[string][]string{
					"spring-0130": {"2026-03-07T06:30:00Z", "2026-03-08T06:30:00Z", "2026-03-09T05:30:00Z"},
					"spring-0230": {"2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"}}},
		} {
			t.Run(night.name, func(t *testing.T) {
				b.clock.Set(night.from)
				for id := range night.want {
					cron := "30 1 * * *"
					if id[len(id)-4:] == "0230" {
						cron = "30 2 * * *"
					}
					sp := spec(id, cron)
					sp.Timezone = "America/New_York"
					b.create(t, sp)
				}
				for now := night.from; !now.After(night.to); now = now.Add(5 * time.Minute) {
					b.clock.Set(now)
					b.pass(t)
				}
				for id, want := range night.want {
					var got []string
					for _, ft := range b.firedAt(t, id) {
						got = append(got, ft.UTC().Format(time.RFC3339))
					}
					require.Equal(t, want, got, id)
				}
			})
		}
	})
}

// TestFirerPrunesOldFires: ended and skipped fires older than the retention are deleted,
// except the schedule's last fire.
func TestFirerPrunesOldFires(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		b.cfg.AuditRetention = time.Hour
		b.firer = b.newFirer(nil)
		sp := spec("old", "@every 10m")
		sp.MaxConcurrent = 1
		b.create(t, sp)
		b.clock.Set(at(10 * time.Minute))
		b.pass(t)
		b.clock.Set(at(20 * time.Minute))
		b.pass(t) // skipped: overlap
		b.end(t, schedules.JobID("old", at(10*time.Minute)), store.JobDone)
		b.clock.Set(at(30 * time.Minute))
		b.pass(t)
		b.end(t, schedules.JobID("old", at(30*time.Minute)), store.JobDone)
		require.Len(t, b.fires(t, "old"), 3)

		_, err := b.svc.SetPaused(context.Background(), "old", true, "admin") // nothing new fires
		require.NoError(t, err)

		b.clock.Set(at(3 * time.Hour))
		res := b.pass(t)
		require.Equal(t, 2, res.Pruned, "the ended and skipped fires of 10:10 and 10:20")
		left := b.fires(t, "old")
		require.Len(t, left, 1)
		require.Equal(t, at(30*time.Minute), left[0].FireTime, "the last fire stays")
		require.Zero(t, b.pass(t).Pruned, "a minute has not passed since the last prune")
	})
}

// TestFirersRace: firers that run at once (a deposed leader that has not noticed yet, without
// its fence) still make each fire time once: the transaction locks the schedule's row and
// reads its cursor under the lock, and the fire row is unique.
func TestFirersRace(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		b.create(t, spec("race", "@every 1s"))
		b.create(t, spec("race2", "@every 2s"))
		b.clock.Set(at(30 * time.Second))
		const n = 4
		errs := make(chan error, n)
		fired := make(chan int, n)
		for range n {
			go func() {
				res, err := b.newFirer(nil).RunOnce(context.Background())
				errs <- err
				fired <- len(res.Fired)
			}()
		}
		total := 0
		for range n {
			require.NoError(t, <-errs)
			total += <-fired
		}
		require.Equal(t, 30+15, total)
		require.Len(t, b.jobs(t), 45)
		require.Len(t, b.firedAt(t, "race"), 30)
		require.Len(t, b.audit(t, schedules.EventFired, "race"), 30)
	})
}

// TestFirerLoop: started, the firer wakes at each fire time by itself (on the real clock);
// Stop is idempotent and safe before Start.
func TestFirerLoop(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		f := schedules.NewFirer(b.st, b.eng, schedules.FirerConfig{Interval: 200 * time.Millisecond, Clock: time.Now})
		f.Stop() // before Start: nothing to stop
		b.clock.Set(time.Now())
		b.create(t, spec("loop", "@every 1s"))
		require.NoError(t, f.Start(context.Background()))
		defer f.Stop()
		require.Eventually(t, func() bool { // no require in here: it runs on a goroutine of its own
			fs, err := b.st.ScheduleFireList(context.Background(), store.ScheduleFireListParams{ScheduleID: "loop"})
			return err == nil && len(fs) >= 2
		}, 20*time.Second, 20*time.Millisecond)
		f.Stop()
		f.Stop()
		fs := b.firedAt(t, "loop")
		require.Equal(t, time.Second, fs[1].Sub(fs[0]), "one second of fire time apart")
	})
}

// TestFirerJobIDTaken: no submit but a schedule's may take a fire's job id (the prefix is
// reserved), and a job of that id the schedule did not make (one written before the prefix
// was reserved) is never taken for the fire's: the fire is skipped, job_id_taken.
func TestFirerJobIDTaken(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		b.create(t, spec("nightly", "@every 10s"))
		taken := schedules.JobID("nightly", at(10*time.Second))
		_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: taken, Type: "noop", Agent: "mallory",
			Payload: json.RawMessage(`{"evil":true}`), Actor: "agent:mallory"})
		var verr *engine.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Equal(t, "job_id", verr.Field)

		// Written straight into the store, as a job of an older version could be.
		_, inserted, err := b.st.JobInsert(ctx, store.JobInsertParams{ID: taken, Type: "noop", Agent: "mallory",
			Payload: json.RawMessage(`{"evil":true}`), MaxAttempts: 1, AvailableAt: b.clock.Now(), Now: b.clock.Now()})
		require.NoError(t, err)
		require.True(t, inserted)
		b.clock.Set(at(25 * time.Second))
		res := b.pass(t)
		require.Len(t, res.Fired, 1, "the fire at 10:00:20 only")
		require.Equal(t, at(20*time.Second), res.Fired[0].FireTime)
		skipped := b.audit(t, schedules.EventSkipped, "nightly")
		require.Len(t, skipped, 1)
		require.Equal(t, schedules.SkipJobIDTaken, skipped[0]["reason"])
		job, err := b.st.JobGet(ctx, taken)
		require.NoError(t, err)
		require.Equal(t, "mallory", job.Agent, "the other job is left as it is")
	})
}

// TestFirerApprovalPolicy: a schedule's job that an approval policy matches is held for
// approval like any submit's, never made pending past it.
func TestFirerApprovalPolicy(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		require.NoError(t, b.st.ApprovalPolicyUpsert(ctx, store.ApprovalPolicy{Name: "all-noop", Type: "noop",
			TTL: time.Hour, OnExpiry: store.ExpiryReject, UpdatedBy: "admin", UpdatedAt: b.clock.Now()}))
		require.NoError(t, b.eng.RefreshApprovalPolicies(ctx))
		b.create(t, spec("held", "@every 10s"))
		b.clock.Set(at(15 * time.Second))
		res := b.pass(t)
		require.Len(t, res.Fired, 1)
		job, err := b.st.JobGet(ctx, res.Fired[0].JobID)
		require.NoError(t, err)
		require.Equal(t, store.JobAwaitingApproval, job.Status, "held, as the policy says")
		req, err := b.st.ApprovalGet(ctx, job.ID, false)
		require.NoError(t, err)
		require.Equal(t, "all-noop", req.Policy)
	})
}

// TestFirerReadsPastABatchOfRunningFires: fires whose jobs run for long, more than a pass
// reads, do not keep another schedule's ended job from being recorded: the passes go round.
func TestFirerReadsPastABatchOfRunningFires(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		b.firer = schedules.NewFirer(b.st, b.eng, schedules.FirerConfigFrom(b.cfg, schedules.FirerConfig{
			Batch: 2, Metrics: b.metrics, Clock: b.clock.Now, Logger: slog.New(slog.DiscardHandler)}))
		b.create(t, spec("long", "@every 10s"))
		b.clock.Set(at(35 * time.Second))
		require.Len(t, b.pass(t).Fired, 3, "three jobs that never end")
		b.create(t, spec("short", "@every 1h"))
		b.clock.Set(at(2 * time.Hour))
		b.pass(t)
		shorts := b.fires(t, "short")
		require.Len(t, shorts, 1)
		b.end(t, shorts[0].JobID, store.JobDone)
		for range 4 {
			b.pass(t)
		}
		require.Equal(t, store.FireEnded, b.fires(t, "short")[0].State, "recorded although older fires fill a batch")
	})
}
