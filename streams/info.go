package streams

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// lagScanMax bounds the fallback count of undelivered entries (see GroupStats): past it the lag
// is reported as lagScanMax, which is all an autoscaler or an alert needs to know.
const lagScanMax = 10000

// GroupRef names one consumer group of one stream.
type GroupRef struct {
	Stream string // stream name (not the key)
	Group  string
}

// GroupStat is the backlog of one consumer group, as XINFO GROUPS reports it.
type GroupStat struct {
	GroupRef
	// Lag is the number of entries not yet delivered to any consumer of the group: the work
	// waiting for a worker. It is what KEDA's redis-streams scaler reads in lag mode.
	Lag int64
	// Pending is the number of entries delivered but not acknowledged (the PEL): work in hand,
	// or entries of dead consumers waiting for the reclaimer.
	Pending int64
	// Exists is false when the group does not exist yet (no worker or orchestrator created
	// it): Lag is then the stream's length, every entry waiting for the group that will read
	// the stream from its start, and Pending is 0.
	Exists bool
}

// GroupStats reads the backlog of every group in one pipeline of XINFO GROUPS and XLEN. The lag
// XINFO reports is taken when it is known to be right: Redis reports it with entries-read, or
// the group has delivered nothing yet (the lag is then the stream's length). Otherwise the
// entries after the group's last delivered one are counted, up to lagScanMax: when Redis
// cannot tell the lag (entries were deleted between the last delivered entry and the end of
// the stream, or the group was created at an explicit id), and always on the embedded mode's
// Redis, which reports the stream's length as the lag and no entries-read.
func (c *Client) GroupStats(ctx context.Context, refs []GroupRef) ([]GroupStat, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.XInfoGroupsCmd, len(refs))
	lens := make([]*redis.IntCmd, len(refs))
	for i, r := range refs {
		cmds[i] = pipe.XInfoGroups(ctx, c.StreamKey(r.Stream))
		lens[i] = pipe.XLen(ctx, c.StreamKey(r.Stream))
	}
	// Per-command errors (a missing stream) are read below; only a transport error fails all.
	if _, err := pipe.Exec(ctx); err != nil && !isPerCommand(cmds) {
		return nil, fmt.Errorf("read group stats: %w", err)
	}
	out := make([]GroupStat, len(refs))
	for i, r := range refs {
		out[i].GroupRef = r
		out[i].Lag = lens[i].Val() // until the group is found; 0 for a missing stream
		groups, err := cmds[i].Result()
		if err != nil {
			if isNoGroup(err) {
				continue
			}
			return nil, fmt.Errorf("read group stats of %s: %w", r.Stream, err)
		}
		for _, g := range groups {
			if g.Name != r.Group {
				continue
			}
			out[i].Exists, out[i].Pending, out[i].Lag = true, g.Pending, g.Lag
			if g.Lag < 0 || (g.EntriesRead <= 0 && !isZeroID(g.LastDeliveredID)) {
				if out[i].Lag, err = c.countAfter(ctx, r.Stream, g.LastDeliveredID); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// isZeroID reports whether id is the id before every entry: a group's last-delivered-id when it
// delivered nothing yet ("0-0"; "0" on the embedded mode's Redis).
func isZeroID(id string) bool { return id == "0-0" || id == "0" }

// isPerCommand reports whether every failed command of a pipeline failed for a reason of its
// own (a missing stream), rather than the connection.
func isPerCommand(cmds []*redis.XInfoGroupsCmd) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil && !isNoGroup(err) {
			return false
		}
	}
	return true
}

// countAfter counts the entries of stream after id, up to lagScanMax.
func (c *Client) countAfter(ctx context.Context, stream, id string) (int64, error) {
	msgs, err := c.rdb.XRangeN(ctx, c.StreamKey(stream), "("+id, "+", lagScanMax).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("count undelivered entries of %s: %w", stream, err)
	}
	return int64(len(msgs)), nil
}
