package streams

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// trimScript trims a stream below the oldest entry that some consumer group still needs, in
// one atomic step: no entry can be delivered or become pending between computing the bound
// and trimming. For every group the bound is the smaller of its oldest pending entry (XPENDING
// summary) and the first entry after its last-delivered-id (the first it has not read); the
// stream's bound is the smallest over all groups. A stream without groups is left alone:
// nobody has read anything from it. The lag of XINFO GROUPS is not used: it is not always
// available (it is unknown after XDEL or XTRIM, and the embedded Redis never reports it) and
// not needed. Ids are read as Redis writes them ("ms-seq") and as the embedded Redis writes a
// group's last-delivered-id before its first delivery ("0").
var trimScript = redis.NewScript(`
-- KEYS[1] -> the stream key
-- ARGV[1] -> "1" to trim, "0" to compute the bound only
-- Returns {minid, removed}: minid is "" when the stream or its groups do not exist.
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(groups) ~= 'table' or groups.err or #groups == 0 then
  return {'', 0}
end
-- parse splits an id; a bare "ms" is "ms-0" (the embedded Redis reports the last-delivered-id
-- of a group that never delivered an entry as "0"). Anything else is an error, never a
-- guess: a wrong bound could trim entries that a group still needs.
local function parse(id)
  if type(id) ~= 'string' then
    return nil
  end
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if ms == nil then
    ms, seq = string.match(id, '^(%d+)$'), '0'
  end
  return tonumber(ms), tonumber(seq)
end
local function parseOrFail(id, what)
  local ms, seq = parse(id)
  if ms == nil then
    error('trim: unexpected ' .. what .. ' ' .. tostring(id))
  end
  return ms, seq
end
local function less(ams, aseq, bms, bseq)
  return ams < bms or (ams == bms and aseq < bseq)
end
local minms, minseq = nil, nil
local function consider(ms, seq)
  if minms == nil or less(ms, seq, minms, minseq) then
    minms, minseq = ms, seq
  end
end
for _, g in ipairs(groups) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  local ms, seq = parseOrFail(f['last-delivered-id'], 'last-delivered-id')
  consider(ms, seq + 1)
  if (tonumber(f['pending']) or 0) > 0 then
    local summary = redis.call('XPENDING', KEYS[1], f['name'])
    -- The embedded Redis leaves out of the summary pending entries whose stream entry was
    -- deleted (none, as the trim keeps pending entries): no smallest id, nothing to keep.
    if summary[2] then
      consider(parseOrFail(summary[2], 'pending id'))
    end
  end
end
local minid = string.format('%.0f-%.0f', minms, minseq)
if ARGV[1] ~= '1' then
  return {minid, 0}
end
return {minid, redis.call('XTRIM', KEYS[1], 'MINID', minid)}
`)

// TrimResult says what TrimUnneeded did to one stream.
type TrimResult struct {
	// MinID is the bound: every entry below it was read and acknowledged by every group. Empty
	// when the stream has no group (nothing was trimmed).
	MinID string
	// Removed is how many entries were deleted.
	Removed int64
}

// TrimUnneeded deletes the entries of the stream that every consumer group has read and
// acknowledged (XTRIM MINID, exact), never an entry that is pending or not yet delivered to
// some group. With dryRun it only computes the bound.
func (c *Client) TrimUnneeded(ctx context.Context, stream string, dryRun bool) (TrimResult, error) {
	arg := "1"
	if dryRun {
		arg = "0"
	}
	res, err := trimScript.Run(ctx, c.rdb, []string{c.StreamKey(stream)}, arg).Slice()
	if err != nil {
		return TrimResult{}, fmt.Errorf("trim %s: %w", stream, err)
	}
	if len(res) != 2 {
		return TrimResult{}, fmt.Errorf("trim %s: unexpected reply %v", stream, res)
	}
	minID, _ := res[0].(string)
	removed, _ := res[1].(int64)
	return TrimResult{MinID: minID, Removed: removed}, nil
}

// TrimBefore deletes the entries of the stream older than t (their ids are millisecond
// timestamps). It is for streams that no group reads, such as the dead-letter queue.
func (c *Client) TrimBefore(ctx context.Context, stream string, t time.Time) (int64, error) {
	ms := t.UnixMilli()
	if ms <= 0 {
		return 0, nil
	}
	n, err := c.rdb.XTrimMinID(ctx, c.StreamKey(stream), EntryIDAt(t)).Result()
	if err != nil {
		return 0, fmt.Errorf("trim %s before %s: %w", stream, t.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
