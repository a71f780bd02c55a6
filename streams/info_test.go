package streams_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/streams"
)

// TestGroupStats runs against the real Redis and the embedded mode's one, whose XINFO GROUPS
// reports the stream's length as the lag: the lag is the entries no consumer of the group has
// read, whatever the stream still holds, and falls to 0 once every entry was delivered.
func TestGroupStats(t *testing.T) {
	t.Parallel()
	for _, b := range trimBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sc, _ := b.setup(t)
			ref := streams.GroupRef{Stream: "s", Group: "g"}
			stat := func() streams.GroupStat {
				t.Helper()
				got, err := sc.GroupStats(ctx, []streams.GroupRef{ref})
				require.NoError(t, err)
				require.Len(t, got, 1)
				return got[0]
			}
			want := func(lag, pending int64) streams.GroupStat {
				return streams.GroupStat{GroupRef: ref, Lag: lag, Pending: pending, Exists: true}
			}

			publish(t, sc, "s", 3)
			require.Equal(t, streams.GroupStat{GroupRef: ref, Lag: 3}, stat(), "no group yet: every entry waits")
			require.NoError(t, sc.EnsureGroup(ctx, "s", "g"))
			require.Equal(t, want(3, 0), stat(), "nothing delivered")

			first := read(t, sc, "s", "g", "w1", 2)
			require.Equal(t, want(1, 2), stat())
			require.NoError(t, sc.Ack(ctx, first))
			require.Equal(t, want(1, 0), stat())

			last := read(t, sc, "s", "g", "w1", 1)
			require.Equal(t, want(0, 1), stat())
			require.NoError(t, sc.Ack(ctx, last))
			n, err := sc.Len(ctx, "s")
			require.NoError(t, err)
			require.EqualValues(t, 3, n, "acked entries stay in the stream until trimmed")
			require.Equal(t, want(0, 0), stat(), "nothing waits, nothing pending")

			publish(t, sc, "s", 1)
			require.Equal(t, want(1, 0), stat())
		})
	}
}

// TestGroupStatsLagUnknownToRedis: deleting an undelivered entry between the group's last
// delivered one and the end of the stream makes Redis report the lag as unknown; the entries
// left are counted instead.
func TestGroupStatsLagUnknownToRedis(t *testing.T) {
	t.Parallel()
	for _, b := range trimBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sc, rdb := b.setup(t)
			ref := streams.GroupRef{Stream: "s", Group: "g"}
			require.NoError(t, sc.EnsureGroup(ctx, "s", "g"))
			ids := publish(t, sc, "s", 4)
			read(t, sc, "s", "g", "w1", 1)
			require.NoError(t, rdb.XDel(ctx, sc.StreamKey("s"), ids[2]).Err())

			stats, err := sc.GroupStats(ctx, []streams.GroupRef{ref})
			require.NoError(t, err)
			require.Equal(t, []streams.GroupStat{{GroupRef: ref, Lag: 2, Pending: 1, Exists: true}}, stats)
		})
	}
}
