package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// fire is one row of schedule_fires: its fire time in Unix seconds, its state and its job.
type fire struct {
	sec   int64
	state string
	jobID string
}

// fires reads the fires of schedule id, oldest first. secExpr turns fire_time into Unix
// seconds in the database's dialect.
func (c *cluster) fires(id, secExpr string) []fire {
	rows, err := c.db.Query(`SELECT `+secExpr+`, state, job_id FROM schedule_fires WHERE schedule_id = ? ORDER BY fire_time`, id)
	require.NoError(c.t, err)
	defer rows.Close()
	var out []fire
	for rows.Next() {
		var f fire
		require.NoError(c.t, rows.Scan(&f.sec, &f.state, &f.jobID))
		out = append(out, f)
	}
	require.NoError(c.t, rows.Err())
	return out
}

// waitFires polls until schedule id has at least n fires, failing after d.
func (c *cluster) waitFires(id, secExpr string, n int, d time.Duration) []fire {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		fs := c.fires(id, secExpr)
		if len(fs) >= n {
			return fs
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %s: schedule %s has %d fires, want %d", d, id, len(fs), n)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
}

// count is the one integer of a query.
func (c *cluster) count(query string, args ...any) int {
	var n int
	require.NoError(c.t, c.db.QueryRow(query, args...).Scan(&n))
	return n
}

// requireOneJobPerSecond checks fires of an @every 1s schedule: each made its job, whose id is
// its fire time's; fire times are distinct and one second apart, with none missing between the
// first and the last; and the schedule made no job, and no schedule.fired row, but theirs.
func (c *cluster) requireOneJobPerSecond(id string, fs []fire) {
	t := c.t
	t.Helper()
	require.NotEmpty(t, fs)
	for i, f := range fs {
		require.Equal(t, "sch-"+id+"-"+strconv.FormatInt(f.sec, 10), f.jobID, "fire %d", i)
		require.Contains(t, []string{"running", "ended"}, f.state, "fire %d made its job", i)
		if i > 0 {
			require.Equal(t, int64(1), f.sec-fs[i-1].sec, "fire %d comes one second after the one before (%d, %d)", i,
				fs[i-1].sec, f.sec)
		}
	}
	require.Equal(t, len(fs), c.count(`SELECT COUNT(*) FROM orchestrator_jobs WHERE job_id LIKE ?`, "sch-"+id+"-%"),
		"one job per fire, no other")
	require.Equal(t, len(fs), c.count(`SELECT COUNT(*) FROM orchestrator_audit WHERE event_type = 'schedule.fired' AND job_id LIKE ?`,
		"sch-"+id+"-%"), "one schedule.fired row per fire")
	require.Zero(t, c.count(`SELECT COUNT(*) FROM orchestrator_audit WHERE event_type = 'schedule.skipped'`))
}

// everySecond is the request of an @every 1s schedule of noop jobs that catches every missed
// fire time up.
func everySecond(id string) client.ScheduleRequest {
	cron, catchUp := "@every 1s", "all"
	return client.ScheduleRequest{ID: id, Cron: &cron, CatchUp: &catchUp,
		Job: &client.ScheduleJob{Type: "noop", Agent: "e2e", Payload: json.RawMessage(`{}`)}}
}

// TestSchedulesFailover: two orchestrators share a database; an @every 1s schedule, created
// through the follower, fires on the leader. The leader is killed with SIGKILL mid-stream;
// the other takes over and goes on from the killed one's cursor. Counted at the server, the
// fires are one per second of fire time, none twice and none missing across the failover,
// each with exactly one job, and every job is published.
func TestSchedulesFailover(t *testing.T) {
	t.Parallel()
	began := time.Now()
	ctx := context.Background()
	c := newCluster(t, "")
	insts := []*instance{c.newInstance("orchestrator-a", c.addr), c.newInstance("orchestrator-b", freeAddr(t))}
	for _, o := range insts {
		c.startInstance(o)
	}
	for _, o := range insts {
		o.waitReady(t, time.Minute)
	}
	first, st := c.waitLeader(insts, 0, 30*time.Second)
	survivor := other(insts, first)
	_, err := survivor.api.CreateSchedule(ctx, everySecond("tick"))
	require.NoError(t, err)
	const secs = "CAST(UNIX_TIMESTAMP(fire_time) AS SIGNED)"

	before := c.waitFires("tick", secs, 4, 30*time.Second)
	first.proc.kill()
	killedAt := time.Now()
	next, _ := c.waitLeader([]*instance{survivor}, st.Leader.Term, time.Minute)
	require.Equal(t, survivor, next)
	t.Logf("%.1fs: %d fires before the kill; %s leads since %s after it", time.Since(began).Seconds(), len(before),
		survivor.name, time.Since(killedAt).Round(time.Millisecond))
	c.waitFires("tick", secs, len(before)+5, 30*time.Second)
	_, err = survivor.api.PauseSchedule(ctx, "tick")
	require.NoError(t, err)

	fs := c.fires("tick", secs)
	t.Logf("%.1fs: %d fires, %d to %d", time.Since(began).Seconds(), len(fs), fs[0].sec, fs[len(fs)-1].sec)
	c.requireOneJobPerSecond("tick", fs)
	// The first fire is the first second after the schedule was created, by the clock of the
	// instance that created it; the fires span the kill.
	created := c.count(`SELECT CAST(FLOOR(UNIX_TIMESTAMP(created_at)) AS SIGNED) FROM schedules WHERE schedule_id = 'tick'`)
	require.Equal(t, int64(created)+1, fs[0].sec)
	require.Less(t, fs[0].sec, killedAt.Unix())
	require.Greater(t, fs[len(fs)-1].sec, killedAt.Unix())

	// Every job reaches its stream: from its fire's transaction, or from the dispatcher for
	// one the killed leader committed but did not publish.
	deadline := time.Now().Add(30 * time.Second)
	for c.count(`SELECT COUNT(*) FROM orchestrator_jobs WHERE job_id LIKE 'sch-tick-%' AND enqueued = 0`) > 0 {
		require.True(t, time.Now().Before(deadline), "every job of the schedule is published within 30 s")
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
	n, err := c.streams.Len(ctx, "noop")
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(len(fs)), "an entry per job (a republished one may add one)")
}

// TestSchedulesEmbedded: in the embedded mode (`orchestrator dev`, SQLite, its in-process
// workers) an @every 1s schedule fires one job per second, and its jobs run; after a restart
// it goes on from where it stopped, catching up the seconds it was down.
func TestSchedulesEmbedded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newEmbedded(t, "")
	dev := c.startDev("dev-1")
	_, err := c.api.CreateSchedule(ctx, everySecond("tick"))
	require.NoError(t, err)
	const secs = "fire_time / 1000000"
	c.waitFires("tick", secs, 3, 30*time.Second)
	require.NoError(t, dev.terminate(t, 30*time.Second))
	stopped := c.fires("tick", secs)

	c.startDev("dev-2")
	c.waitFires("tick", secs, len(stopped)+3, 30*time.Second)
	_, err = c.api.PauseSchedule(ctx, "tick")
	require.NoError(t, err)
	fs := c.fires("tick", secs)
	c.requireOneJobPerSecond("tick", fs)
	deadline := time.Now().Add(30 * time.Second)
	for {
		done := c.count(`SELECT COUNT(*) FROM orchestrator_jobs WHERE job_id LIKE 'sch-tick-%' AND status = 'done'`)
		if done == len(fs) {
			break
		}
		require.True(t, time.Now().Before(deadline), fmt.Sprintf("%d of %d jobs done after 30 s", done, len(fs)))
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
	s, err := c.api.GetSchedule(ctx, "tick")
	require.NoError(t, err)
	require.NotNil(t, s.LastFire)
	require.Equal(t, fs[len(fs)-1].jobID, s.LastFire.JobID)
}
