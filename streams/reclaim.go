package streams

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisMarkerKey holds the run_id of the Redis server at the moment the orchestrator last knew
// its stream data to be complete (see Marker).
const redisMarkerKey = "orchestrator:redis_run_id"

// MarkerKey is the Redis key of the data-loss marker.
func (c *Client) MarkerKey() string { return c.prefix + redisMarkerKey }

// AutoClaimParams select one XAUTOCLAIM call.
type AutoClaimParams struct {
	Stream   string // stream name (not the key)
	Group    string
	Consumer string // the consumer the claimed entries are transferred to
	MinIdle  time.Duration
	Start    string // "0-0" (or "") for the beginning; then the previous call's Next
	Count    int
}

// AutoClaimResult is what one XAUTOCLAIM returned.
type AutoClaimResult struct {
	// Claimed are the entries idle past MinIdle, now owned by Consumer with their idle time reset.
	Claimed []Delivery
	// Deleted are pending entries whose stream entry no longer exists (trimmed or XDELed);
	// Redis 7 has already dropped them from the pending list, and the caller acks them anyway
	// (a no-op there, a clean-up on servers that keep them).
	Deleted []string
	// Next is where the next call starts; "0-0" means the scan went round the whole pending list.
	Next string
}

// AutoClaim runs XAUTOCLAIM once. A missing group or stream is reported as ErrNoGroup.
func (c *Client) AutoClaim(ctx context.Context, p AutoClaimParams) (AutoClaimResult, error) {
	start := p.Start
	if start == "" {
		start = "0-0"
	}
	msgs, next, deleted, err := c.rdb.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream:   c.StreamKey(p.Stream),
		Group:    p.Group,
		Consumer: p.Consumer,
		MinIdle:  p.MinIdle,
		Start:    start,
		Count:    int64(p.Count),
	}).Result()
	if err != nil {
		if isNoGroup(err) {
			return AutoClaimResult{}, fmt.Errorf("autoclaim %s/%s: %w", p.Stream, p.Group, ErrNoGroup)
		}
		return AutoClaimResult{}, fmt.Errorf("autoclaim %s/%s: %w", p.Stream, p.Group, err)
	}
	res := AutoClaimResult{Deleted: deleted, Next: next}
	for _, m := range msgs {
		res.Claimed = append(res.Claimed, c.delivery(p.Stream, p.Group, m))
	}
	return res, nil
}

// ErrNoGroup means a consumer group (or its stream) does not exist.
var ErrNoGroup = errors.New("no such consumer group")

func isNoGroup(err error) bool {
	return strings.HasPrefix(err.Error(), "NOGROUP") || strings.Contains(err.Error(), "no such key")
}

// AckIDs acknowledges entries of one stream and group by id.
func (c *Client) AckIDs(ctx context.Context, stream, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := c.rdb.XAck(ctx, c.StreamKey(stream), group, ids...).Err(); err != nil {
		return fmt.Errorf("ack %d entries of %s/%s: %w", len(ids), stream, group, err)
	}
	return nil
}

// GroupExists reports whether the consumer group exists on the stream (false when the stream
// itself is missing).
func (c *Client) GroupExists(ctx context.Context, stream, group string) (bool, error) {
	groups, err := c.rdb.XInfoGroups(ctx, c.StreamKey(stream)).Result()
	if err != nil {
		if isNoGroup(err) {
			return false, nil
		}
		return false, fmt.Errorf("list groups of %s: %w", stream, err)
	}
	for _, g := range groups {
		if g.Name == group {
			return true, nil
		}
	}
	return false, nil
}

// RunID returns the run_id of the Redis server (INFO server). It changes whenever the server
// restarts or a replica is promoted: either may have lost recent writes.
func (c *Client) RunID(ctx context.Context) (string, error) {
	info, err := c.rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("read redis server info: %w", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", errors.New("read redis server info: no run_id")
}

// Marker returns the run_id recorded by SetMarker, and false when there is none: Redis lost
// its data (a FLUSHALL, a restart without persistence) or the orchestrator never ran here.
func (c *Client) Marker(ctx context.Context) (string, bool, error) {
	v, err := c.rdb.Get(ctx, c.MarkerKey()).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read redis marker: %w", err)
	}
	return v, true, nil
}

// SetMarker sets the marker to value unconditionally.
func (c *Client) SetMarker(ctx context.Context, value string) error {
	if err := c.rdb.Set(ctx, c.MarkerKey(), value, 0).Err(); err != nil {
		return fmt.Errorf("write redis marker: %w", err)
	}
	return nil
}

// swapMarkerScript is a compare-and-set of the marker.
var swapMarkerScript = redis.NewScript(`
-- KEYS[1] -> the marker key
-- ARGV[1] -> the value the marker must still hold
-- ARGV[2] -> the new value
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// SwapMarker sets the marker to value only while it still holds old, and reports whether it
// did. A recovery sets a "recovering" value first and swaps in the run_id at the end: if Redis
// lost its data again meanwhile, the swap fails and the next pass recovers again.
func (c *Client) SwapMarker(ctx context.Context, old, value string) (bool, error) {
	n, err := swapMarkerScript.Run(ctx, c.rdb, []string{c.MarkerKey()}, old, value).Int()
	if err != nil {
		return false, fmt.Errorf("swap redis marker: %w", err)
	}
	return n == 1, nil
}

// EntryIDAt is the first entry id a stream could hold at t ("ms-0"): a start for JobEntries.
func EntryIDAt(t time.Time) string { return strconv.FormatInt(max(t.UnixMilli(), 0), 10) + "-0" }

// JobEntries reads up to count entries of stream from the entry id start on (inclusive) and
// returns the job ids they name ("" for an entry without one) and the start of the next read:
// after the last entry read, or start itself when there was none.
func (c *Client) JobEntries(ctx context.Context, stream, start string, count int) (jobIDs []string, next string, err error) {
	msgs, err := c.rdb.XRangeN(ctx, c.StreamKey(stream), start, "+", int64(count)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", fmt.Errorf("read the entries of %s from %s: %w", stream, start, err)
	}
	if len(msgs) == 0 {
		return nil, start, nil
	}
	jobIDs = make([]string, len(msgs))
	for i, m := range msgs {
		jobIDs[i], _ = m.Values[fieldJobID].(string)
	}
	next, err = nextEntryID(msgs[len(msgs)-1].ID)
	return jobIDs, next, err
}

// IsEntryID reports whether id is a stream entry id, "ms-seq" with both parts decimal and
// within 64 bits: what Redis hands out, and what XRANGE takes.
func IsEntryID(id string) bool {
	_, _, ok := parseEntryID(id)
	return ok
}

// EntryTime is when the entry id was assigned (its milliseconds part); ok is false when id is
// not an entry id.
func EntryTime(id string) (t time.Time, ok bool) {
	ms, _, ok := parseEntryID(id)
	if !ok || ms > math.MaxInt64 {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(ms)), true
}

// parseEntryID splits a stream entry id "ms-seq"; ok is false when id is not one.
func parseEntryID(id string) (ms, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, found && err1 == nil && err2 == nil
}

// nextEntryID is the smallest entry id after id ("ms-seq"), the start of the next page of an
// inclusive XRANGE (the exclusive "(" form is Redis 6.2 and later only, and not in the
// embedded mode's Redis).
func nextEntryID(id string) (string, error) {
	ms, seq, ok := parseEntryID(id)
	if !ok {
		return "", fmt.Errorf("stream entry id %q is not ms-seq", id)
	}
	return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq+1, 10), nil
}
