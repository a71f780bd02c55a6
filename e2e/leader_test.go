package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// failoverBound is the longest a leader failover may take, from the kill (or SIGTERM) to the
// new term's acquired_at (the server's clock: how fast the test notices is not the
// failover's). What bounds it: a killed leader's MariaDB connection is closed by the kernel
// when its process dies, and the server frees the lock at once (a resigning leader releases
// it explicitly); the follower tries GET_LOCK every election interval (1 s ± 10%), so it
// holds the lock within about 1.1 s, then acquires the next term in one transaction. 5 s
// leaves room for a loaded machine, and is still below what a failover that waited for the
// server to notice a dead connection would take.
const failoverBound = 5 * time.Second

// quickRescues makes a job whose claim answer was lost with a killed instance come back within
// seconds: its lease expires after 3 s, and an idle stream entry is looked at after 2 s.
const quickRescues = `
claim_idle: 2s
reclaim_interval: 500ms
` + shortLeases

// TestLeaderFailover: two orchestrators share a database and a Redis prefix; one leads. Killed
// with SIGKILL, the leader is replaced within failoverBound by the other, in the next term;
// restarted, it joins as a follower and the term stays. Stopped with SIGTERM, the new leader
// resigns and the other takes over within failoverBound too. A worker behind a failover proxy
// keeps working through it all: every job, submitted before, between and after, ends done once.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	began := time.Now()
	c := newCluster(t, quickRescues)
	insts := []*instance{c.newInstance("orchestrator-a", c.addr), c.newInstance("orchestrator-b", freeAddr(t))}
	for _, o := range insts {
		c.startInstance(o)
		o.waitReady(t, time.Minute)
	}
	lb := newFailover(t, insts...)
	c.api = client.New(lb.url, c.adminToken)
	c.startWorker("worker-1", "ORCH_API_URL="+lb.url)

	first, st := c.waitLeader(insts, 0, 30*time.Second)
	term1 := st.Leader.Term
	requireLeaderIs(t, first, st)
	t.Logf("%s leads in term %d since %s", first.name, term1, st.Leader.Since.Format(time.RFC3339Nano))

	// Jobs in flight when the leader dies: the worker's calls that were on their way to it fail
	// and are retried on the other instance.
	before, sleepy := ids("before", 300), ids("sleepy", 40)
	c.submitMany("sleep", sleepy, func(int) string { return `{"ms": 300}` }, 4)
	c.submitMany("noop", before, func(int) string { return `{}` }, 8)

	// SIGKILL: the lock goes with the dead process's connection.
	{
		survivor := other(insts, first)
		killedAt := time.Now()
		first.proc.kill()
		next, st := c.waitLeader([]*instance{survivor}, term1, time.Minute)
		took := st.Leader.Since.Sub(killedAt)
		t.Logf("SIGKILL failover: %s leads in term %d %s after the kill (seen %s after it)", next.name, st.Leader.Term,
			took.Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))
		require.Less(t, took, failoverBound, "failover after SIGKILL: the new term began %s after the kill", took)
		require.Equal(t, term1+1, st.Leader.Term, "the next term")
		requireLeaderIs(t, survivor, st)
		require.False(t, st.Leader.Since.Before(killedAt.Truncate(time.Second)), "since %s is after the kill", st.Leader.Since)

		// The killed instance comes back as a follower; the term does not move.
		c.startInstance(first)
		first.waitReady(t, time.Minute)
		watchUntil := time.Now().Add(3 * time.Second) // three election intervals of the newcomer
		for time.Now().Before(watchUntil) {
			for _, o := range insts {
				s, err := c.status(o)
				require.NoError(t, err)
				require.NotNil(t, s.Leader)
				require.Equal(t, term1+1, s.Leader.Term, "the term moved while %s rejoined", first.name)
				require.Equal(t, o == survivor, s.ThisInstanceLeads, "%s leads", o.name)
			}
			time.Sleep(50 * time.Millisecond) // observation pace, not synchronisation
		}
	}

	between := ids("between", 300)
	c.submitMany("noop", between, func(int) string { return `{}` }, 8)
	c.submitMany("sleep", ids("sleepier", 40), func(int) string { return `{"ms": 300}` }, 4)

	// SIGTERM: the leader resigns, releasing the lock.
	{
		leader, st := c.waitLeader(insts, 0, time.Minute)
		term2 := st.Leader.Term
		follower := other(insts, leader)
		stoppedAt := time.Now()
		require.NoError(t, leader.proc.cmd.Process.Signal(syscall.SIGTERM))
		next, st := c.waitLeader([]*instance{follower}, term2, time.Minute)
		took := st.Leader.Since.Sub(stoppedAt)
		t.Logf("SIGTERM failover: %s leads in term %d %s after the signal (seen %s after it)", next.name, st.Leader.Term,
			took.Round(time.Millisecond), time.Since(stoppedAt).Round(time.Millisecond))
		require.Less(t, took, failoverBound, "failover after SIGTERM: the new term began %s after the signal", took)
		require.Equal(t, term2+1, st.Leader.Term)
		requireLeaderIs(t, follower, st)
		require.NoError(t, leader.proc.waitExit(t, 30*time.Second), "%s stops cleanly on SIGTERM", leader.name)
	}

	after := ids("after", 300)
	c.submitMany("noop", after, func(int) string { return `{}` }, 8)
	total := len(before) + len(sleepy) + len(between) + 40 + len(after)
	t.Logf("%.1fs: %d jobs submitted; jobs by status %v", time.Since(began).Seconds(), total, c.statusCounts())
	c.waitStatus("done", total, 2*time.Minute)
	t.Logf("%.1fs: every job done", time.Since(began).Seconds())
	done := c.doneAuditCounts()
	require.Len(t, done, total)
	for id, n := range done {
		require.Equal(t, 1, n, "job %s done %d times", id, n)
	}

	// The audit tells the same story: three elections in consecutive terms, one resignation.
	var elected []int64
	var resigned []int64
	rows, err := c.db.Query(`SELECT event_type, CAST(JSON_VALUE(details, '$.term') AS SIGNED)
		FROM orchestrator_audit WHERE event_type LIKE 'leader.%' ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var ev string
		var term int64
		require.NoError(t, rows.Scan(&ev, &term))
		switch ev {
		case "leader.elected":
			elected = append(elected, term)
		case "leader.resigned":
			resigned = append(resigned, term)
		}
	}
	require.NoError(t, rows.Close())
	require.Equal(t, []int64{term1, term1 + 1, term1 + 2}, elected)
	require.Equal(t, []int64{term1 + 1}, resigned)
}

// TestLeaderOnePerCluster: two clusters on one MariaDB server (a database each) both have a
// leader at once. GET_LOCK names are server-wide, so the lock is named after the database: with
// one name for all, the first cluster's leader would leave every other cluster without one (no
// dispatcher, no rescues), and a failover could hand the lock to another cluster.
func TestLeaderOnePerCluster(t *testing.T) {
	t.Parallel()
	c1, c2 := newCluster(t, ""), newCluster(t, "")
	o1, o2 := c1.newInstance("orchestrator-1", c1.addr), c2.newInstance("orchestrator-2", c2.addr)
	c1.startInstance(o1)
	c2.startInstance(o2)
	_, st1 := c1.waitLeader([]*instance{o1}, 0, 30*time.Second)
	_, st2 := c2.waitLeader([]*instance{o2}, 0, 30*time.Second)
	requireLeaderIs(t, o1, st1)
	requireLeaderIs(t, o2, st2)
}

// other returns the instance of the pair that is not o.
func other(pair []*instance, o *instance) *instance {
	if pair[0] == o {
		return pair[1]
	}
	return pair[0]
}

// requireLeaderIs checks that the status names o's process as the leader (leader ids are
// hostname-pid by default).
func requireLeaderIs(t *testing.T, o *instance, st client.Status) {
	t.Helper()
	require.NotNil(t, st.Leader)
	require.True(t, strings.HasSuffix(st.Leader.LeaderID, fmt.Sprintf("-%d", o.proc.cmd.Process.Pid)),
		"leader id %q is not %s (pid %d)", st.Leader.LeaderID, o.name, o.proc.cmd.Process.Pid)
}
