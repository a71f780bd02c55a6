package leader_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/leader"
)

func TestMySQLElector(t *testing.T) {
	t.Parallel()

	t.Run("ElectsAndResigns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e, rec := b.newMySQL(t, "a", testInterval)
		require.False(t, e.IsLeader())
		require.NoError(t, e.Start(t.Context()))

		el := rec.next(t)
		require.EqualValues(t, 1, el.term)
		require.NoError(t, el.ctx.Err(), "the leader context is live")
		require.True(t, e.IsLeader())
		require.EqualValues(t, 1, e.Term())
		require.NotZero(t, e.ConnectionID())

		ls, err := e.Leader(t.Context())
		require.NoError(t, err)
		require.EqualValues(t, 1, ls.Term)
		require.Equal(t, "a", ls.LeaderID)
		require.False(t, ls.AcquiredAt.IsZero())
		b.waitRenewals(t, 1, 2, nil) // the leader keeps checking and renewing

		e.Stop()
		require.Error(t, el.ctx.Err(), "Stop cancels the leader context")
		requireClosed(t, el.returned, "Stop returns after OnElected")
		require.False(t, e.IsLeader())
		require.Zero(t, e.Term())
		require.Zero(t, e.ConnectionID())
		details := b.requireAudit(t, "leader.elected leader:a", "leader.resigned leader:a")
		require.EqualValues(t, 1, details[0]["term"])
		require.EqualValues(t, 1, details[1]["term"])
		e.Stop() // idempotent
	})

	t.Run("StopBeforeStart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e, rec := b.newMySQL(t, "a", testInterval)
		e.Stop()
		e.Stop()
		require.NoError(t, e.Start(t.Context()))
		require.EqualValues(t, 1, rec.next(t).term)
	})

	t.Run("StopsWithContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e, rec := b.newMySQL(t, "a", testInterval)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		require.NoError(t, e.Start(ctx))
		el := rec.next(t)
		cancel()
		requireClosed(t, el.returned, "the end of Start's context ends leadership")
		require.Eventually(t, func() bool { return !e.IsLeader() }, waitMax, time.Millisecond)
	})

	t.Run("FollowerTakesOverAfterStop", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a, recA := b.newMySQL(t, "a", testInterval)
		c, recC := b.newMySQL(t, "c", testInterval)
		require.NoError(t, a.Start(t.Context()))
		require.NoError(t, c.Start(t.Context()))

		// Exactly one leads, and it stays that way over several election steps.
		var first election
		lead, follow, recLead, recFollow := a, c, recA, recC
		select {
		case first = <-recA.elected:
		case first = <-recC.elected:
			lead, follow, recLead, recFollow = c, a, recC, recA
		case <-time.After(waitMax):
			t.Fatal("nobody was elected")
		}
		require.EqualValues(t, 1, first.term)
		b.waitRenewals(t, 1, 3, func() {
			require.False(t, a.IsLeader() && c.IsLeader(), "two leaders")
		})
		require.True(t, lead.IsLeader())
		require.False(t, follow.IsLeader())
		recFollow.requireNone(t)

		// The leader resigns: the follower takes over within a few intervals. Without the
		// explicit release it would wait for the server to drop the connection (10 s).
		lead.Stop()
		stopped := time.Now()
		requireDone(t, first.ctx, "the resigned leader's context ends")
		second := recFollow.next(t)
		took := time.Since(stopped)
		t.Logf("takeover after %s (interval %s)", took, testInterval)
		// A few intervals on an idle machine; the bound leaves a loaded one room and still
		// tells the explicit release from the server's 10 s.
		require.Less(t, took, 5*time.Second, "takeover after the leader resigned")
		require.EqualValues(t, 2, second.term)
		require.EqualValues(t, 2, follow.Term())

		// The old leader starts again and stays a follower.
		require.NoError(t, lead.Start(t.Context()))
		b.waitRenewals(t, 2, 3, func() {
			require.False(t, lead.IsLeader(), "the restarted elector must follow")
		})
		recLead.requireNone(t)
		require.True(t, follow.IsLeader())
	})

	t.Run("StepsDownWhenConnectionKilled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A longer interval than the other tests: after a loss the old leader waits two
		// intervals before campaigning, and the follower's next attempt must come first.
		const interval = 100 * time.Millisecond
		a, recA := b.newMySQL(t, "a", interval)
		require.NoError(t, a.Start(t.Context()))
		first := recA.next(t)
		c, recC := b.newMySQL(t, "c", interval)
		require.NoError(t, c.Start(t.Context()))

		id := a.ConnectionID()
		require.NotZero(t, id)
		_, err := b.raw.ExecContext(t.Context(), fmt.Sprintf("KILL %d", id))
		require.NoError(t, err)
		killed := time.Now()

		requireDone(t, first.ctx, "the leader context ends when the lock is lost")
		took := time.Since(killed)
		t.Logf("leader context cancelled %s after the kill (interval %s)", took, interval)
		require.Less(t, took, 5*time.Second, "a few intervals; the bound leaves a loaded machine room")
		requireClosed(t, first.returned, "OnElected returned")

		second := recC.next(t)
		require.EqualValues(t, 2, second.term)
		require.Eventually(t, func() bool { return !a.IsLeader() }, waitMax, time.Millisecond)
		b.waitRenewals(t, 2, 3, func() {
			require.False(t, a.IsLeader(), "the old leader must follow")
		})
		recA.requireNone(t)

		// c may be elected before a has recorded its loss: compare without order.
		events := b.auditEvents(t)
		var got []string
		for _, ev := range events {
			got = append(got, ev.EventType+" "+ev.Actor)
			if ev.EventType == leader.EventLost {
				var d struct {
					Term   int64
					Reason string
				}
				require.NoError(t, json.Unmarshal(ev.Details, &d))
				require.EqualValues(t, 1, d.Term)
				require.Contains(t, d.Reason, "check lock "+b.lockName+": ")
			}
		}
		require.ElementsMatch(t, []string{"leader.elected leader:a", "leader.lost leader:a", "leader.elected leader:c"}, got)
	})

	t.Run("StepsDownWhenTermMovesOn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a, rec := b.newMySQL(t, "a", testInterval)
		require.NoError(t, a.Start(t.Context()))
		first := rec.next(t)

		// Someone acquires a term without the lock (a misconfigured instance with another lock
		// name, say): the leader's next renewal is fenced and it steps down, then campaigns
		// again and, holding the lock alone, acquires a newer term.
		intruder, err := b.st.LeaderAcquire(t.Context(), "intruder", time.Now())
		require.NoError(t, err)
		require.EqualValues(t, 2, intruder)
		requireDone(t, first.ctx, "a fenced renewal ends leadership")
		second := rec.next(t)
		require.EqualValues(t, 3, second.term)
		details := b.requireAudit(t, "leader.elected leader:a", "leader.lost leader:a", "leader.elected leader:a")
		require.Contains(t, details[1]["reason"], "newer leadership term")
	})
}

func TestNewMySQLValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.openDB(t)
	long := string(make([]byte, leader.IDMax+1))
	for name, cfg := range map[string]leader.Config{
		"WaitTimeoutNotSeconds":  {WaitTimeout: 1500 * time.Millisecond},
		"WaitTimeoutTooShort":    {WaitTimeout: 2 * time.Second},
		"IntervalTooLong":        {Interval: 5 * time.Second},
		"NegativeInterval":       {Interval: -time.Second},
		"IDTooLong":              {ID: long},
		"LockNameTooLong":        {LockName: long[:leader.LockNameMax+1]},
		"NegativeWaitTimeout":    {WaitTimeout: -time.Second},
		"ShortIntervalLongCheck": {Interval: 10 * time.Millisecond, WaitTimeout: 2 * time.Second},
	} {
		_, err := leader.NewMySQL(db, b.st, cfg)
		require.ErrorContains(t, err, "invalid leader config", name)
	}
	_, err := leader.NewMySQL(nil, b.st, leader.Config{})
	require.Error(t, err)
	e, err := leader.NewMySQL(db, b.st, leader.Config{Interval: 3 * time.Second, WaitTimeout: 9 * time.Second})
	require.NoError(t, err)
	e.Stop()
}
