package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// PendingEntry names one entry of a consumer group as delivered to one consumer.
type PendingEntry struct {
	Stream   string // stream name (not the key)
	Group    string
	Consumer string
	ID       string // entry id
}

// Delivered reports, for each entry, whether it is pending for its consumer: delivered to that
// consumer by XREADGROUP (or moved to it by XCLAIM) and not acknowledged since. It is one
// pipeline of XPENDING <key> <group> <id> <id> 1 <consumer>, one round trip whatever the count.
// An entry of a missing stream or group, or with an id Redis cannot parse, is not delivered.
func (c *Client) Delivered(ctx context.Context, entries []PendingEntry) ([]bool, error) {
	out := make([]bool, len(entries))
	if len(entries) == 0 {
		return out, nil
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(entries))
	for i, e := range entries {
		if e.Consumer == "" || e.ID == "" {
			continue // XPENDING without a consumer would match any consumer's entry
		}
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: c.StreamKey(e.Stream), Group: e.Group, Start: e.ID, End: e.ID, Count: 1, Consumer: e.Consumer,
		})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// One command's error reply (a group that does not exist) is read below; any other
		// error is the round trip's, and says nothing was checked.
		var reply redis.Error
		if !errors.As(err, &reply) {
			return nil, fmt.Errorf("pending entries of %d claims: %w", len(entries), err)
		}
	}
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		pending, err := cmd.Result()
		switch {
		case err == nil:
			out[i] = len(pending) == 1 && pending[0].ID == entries[i].ID && pending[0].Consumer == entries[i].Consumer
		case isNoGroup(err), isBadID(err):
			// Nothing was delivered from a group that does not exist, nor under an id that
			// cannot be one.
		default:
			return nil, fmt.Errorf("pending entries of %d claims: %w", len(entries), err)
		}
	}
	return out, nil
}

// isBadID reports Redis's refusal of a malformed entry id ("ERR Invalid stream ID ...").
func isBadID(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(strings.ToLower(rerr.Error()), "invalid stream id")
}
