package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestPoolsCreateScale(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	t.Run("CreateIdempotentScaleRestart", func(t *testing.T) {
		t.Parallel()
		args := []string{"pools", "create", "mistral", "--agent", "alice", "--model", "mistral-7b", "--types", "noop,sleep",
			"--workers", "2", "--adapter", "vllm", "--hold", "5m", "--metadata", `{"team": "chat"}`}
		r := b.runOK(t, args...)
		require.Equal(t, []string{"mistral", "starting", "0/2", "created"}, tableRows(t, r.stdout)[0], "%s", r)
		r = b.runOK(t, args...)
		require.Equal(t, "unchanged", last(tableRows(t, r.stdout)[0]), "%s", r)

		p := b.pool(t, "mistral")
		require.Equal(t, []string{"noop", "sleep"}, p.Types)
		require.Equal(t, 300, p.HoldSeconds)
		require.JSONEq(t, `{"team": "chat"}`, string(p.Metadata))

		r = b.runOK(t, "pools", "scale", "mistral", "5")
		require.Equal(t, []string{"mistral", "starting", "0/5", "updated"}, tableRows(t, r.stdout)[0], "%s", r)
		p = b.pool(t, "mistral")
		require.Equal(t, 5, p.DesiredWorkers)
		require.Equal(t, 300, p.HoldSeconds, "scale keeps the rest of the spec")
		require.JSONEq(t, `{"team": "chat"}`, string(p.Metadata))

		b.runOK(t, "pools", "drain", "mistral", "--wait", "--poll", "20ms")
		r = b.run(t, "pools", "scale", "mistral", "1")
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "pool mistral is stopped: scaling it would start it again; add --restart")

		res := decodeJSON[client.PoolResponse](t, b.runOK(t, "pools", "scale", "mistral", "1", "--restart", "-o", "json"))
		require.True(t, res.Updated)
		require.Equal(t, client.PoolStarting, res.Pool.Status)
		require.Equal(t, 1, res.Pool.DesiredWorkers)
	})

	t.Run("RestartByCreate", func(t *testing.T) {
		t.Parallel()
		b.createPool(t, "again", 1)
		b.runOK(t, "pools", "evict", "again")
		r := b.runOK(t, "pools", "create", "again", "--agent", "alice", "--model", "m", "--types", "noop")
		require.Equal(t, []string{"again", "starting", "0/1", "restarted"}, tableRows(t, r.stdout)[0], "%s", r)
	})

	t.Run("ListAndGet", func(t *testing.T) {
		t.Parallel()
		b.createPool(t, "listed", 1)
		b.registerSeen(t, "listed-w1", "listed")

		r := b.runOK(t, "pools", "list")
		require.Regexp(t, `(?m)^listed\s+alice\s+m\s+noop\s+running\s+[01]/1\s+forever\s`, r.stdout, "spawned_workers is as last counted")
		list := decodeJSON[client.PoolList](t, b.runOK(t, "pools", "list", "-o", "json"))
		require.NotEmpty(t, list.Pools)

		r = b.runOK(t, "pools", "get", "listed")
		require.Regexp(t, `(?m)^STATUS\s+running$`, r.stdout)
		require.Regexp(t, `(?m)^listed-w1\s+n1\s+-\s+-\s+idle\s+-\s+0/1\s+0\s+`, r.stdout)
		p := decodeJSON[client.Pool](t, b.runOK(t, "pools", "get", "listed", "-o", "json"))
		require.Len(t, p.Workers, 1)
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, "pools", "get", "nope")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "404 not_found")

		r = b.run(t, "pools", "create", "bad", "--agent", "alice", "--model", "m", "--types", "no-such-type")
		require.Equal(t, exitAPI, r.code, "%s", r)
		require.Contains(t, r.stderr, "(field types)")

		b.createPool(t, "gone", 1)
		b.runOK(t, "pools", "evict", "gone")
		r = b.run(t, "pools", "drain", "gone")
		require.Equal(t, exitAPI, r.code, "an evicted pool cannot drain: %s", r)
		require.Contains(t, r.stderr, "409")

		for _, args := range [][]string{
			{"pools", "create", "x", "--agent", "a", "--model", "m"},
			{"pools", "create", "x", "--agent", "a", "--model", "m", "--types", "noop", "--hold", "1.5s"},
			{"pools", "create", "x", "--agent", "a", "--model", "m", "--types", "noop", "--metadata", "{"},
			{"pools", "scale", "x", "-1"},
			{"pools", "scale", "x"},
			{"pools", "drain", "x", "--wait", "--wait-timeout", "0s"},
		} {
			r := b.run(t, args...)
			require.Equal(t, exitUsage, r.code, "%v: %s", args, r)
		}
	})
}

func TestPoolsDrainEvict(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	t.Run("DrainWaitsForTheWorkers", func(t *testing.T) {
		t.Parallel()
		b.createPool(t, "busy", 1)
		b.registerSeen(t, "busy-w1", "busy")
		results := make(chan result, 1)
		go func() { results <- b.run(t, "pools", "drain", "busy", "--wait", "--poll", "20ms", "-o", "json") }()
		b.waitPool(t, "busy", func(p client.Pool) bool {
			return p.Status == client.PoolDraining && p.Workers[0].Instruction == client.InstructionDrain
		})
		// The worker finished its jobs and leaves, as a real one would.
		require.NoError(t, b.api.DeregisterWorker(t.Context(), "busy-w1"))
		r := <-results
		require.Equal(t, exitOK, r.code, "%s", r)
		ch := decodeJSON[client.PoolChange](t, r)
		require.True(t, ch.Changed)
		require.Equal(t, client.PoolStopped, ch.Pool.Status)

		// Draining again changes nothing.
		r = b.runOK(t, "pools", "drain", "busy")
		row := tableRows(t, r.stdout)[0]
		require.Equal(t, []string{"busy", "stopped", "no"}, []string{row[0], row[1], row[3]}, "%s", r)
	})

	t.Run("DrainTimeoutExits5", func(t *testing.T) {
		t.Parallel()
		b.createPool(t, "stuck", 1)
		b.registerSeen(t, "stuck-w1", "stuck")
		r := b.run(t, "pools", "drain", "stuck", "--wait", "--poll", "20ms", "--wait-timeout", "300ms")
		require.Equal(t, exitTimeout, r.code, "%s", r)
		require.Contains(t, r.stderr, "timed out after 300ms waiting until pool stuck is drained (stopped); "+
			"last seen: pool stuck draining: 1 live worker, 0 jobs in flight")
		require.Equal(t, "draining", tableRows(t, r.stdout)[0][1], "the pool's last state is shown")
	})

	t.Run("EvictWaitsUntilNoLiveWorker", func(t *testing.T) {
		t.Parallel()
		b.createPool(t, "doomed", 1)
		b.registerSeen(t, "doomed-w1", "doomed")
		results := make(chan result, 1)
		go func() { results <- b.run(t, "pools", "evict", "doomed", "--wait", "--poll", "20ms") }()
		b.waitPool(t, "doomed", func(p client.Pool) bool {
			return p.Status == client.PoolEvicted && p.Workers[0].Instruction == client.InstructionStop
		})
		require.NoError(t, b.api.DeregisterWorker(t.Context(), "doomed-w1"))
		r := <-results
		require.Equal(t, exitOK, r.code, "%s", r)
		require.Equal(t, []string{"doomed", "evicted", "0/1", "yes"}, tableRows(t, r.stdout)[0][:4], "%s", r)
	})
}

func TestControl(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	r := b.runOK(t, "control", "reconcile")
	require.Equal(t, []string{"yes"}, tableRows(t, r.stdout)[0], "%s", r)
	require.True(t, decodeJSON[client.ReconcileResponse](t, b.runOK(t, "control", "reconcile", "-o", "json")).Triggered)

	r = b.runOK(t, "control", "drain")
	require.Contains(t, r.stderr, "nothing to drain")

	b.createPool(t, "a", 1)
	b.createPool(t, "b", 1)
	b.registerSeen(t, "b-w1", "b")
	results := make(chan result, 1)
	go func() { results <- b.run(t, "control", "drain", "--wait", "--poll", "20ms", "-o", "json") }()
	b.waitPool(t, "b", func(p client.Pool) bool { return p.Status == client.PoolDraining })
	require.NoError(t, b.api.DeregisterWorker(t.Context(), "b-w1"))
	r = <-results
	require.Equal(t, exitOK, r.code, "%s", r)
	doc := decodeJSON[drainAllDoc](t, r)
	require.Len(t, doc.Drained, 2)
	require.Len(t, doc.Pools, 2)
	for _, p := range doc.Pools {
		require.Equal(t, client.PoolStopped, p.Status)
	}

	b.createPool(t, "c", 1)
	b.registerSeen(t, "c-w1", "c")
	r = b.run(t, "control", "drain", "--wait", "--poll", "20ms", "--wait-timeout", "200ms")
	require.Equal(t, exitTimeout, r.code, "%s", r)
	require.Contains(t, r.stderr, "last seen: 3 pools: 1 draining, 2 stopped; 1 worker left")
	require.Regexp(t, `(?m)^c\s+alice\s+m\s+noop\s+draining\s`, r.stdout, "every pool is shown")
}
