package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Fields of a dead-letter entry (besides job_id and type).
const (
	fieldOriginStream = "origin_stream"
	fieldAttempts     = "attempts"
	fieldLastError    = "last_error"
)

// DeadLetterErrorMax caps the last_error carried by a DLQ entry; the job row has the whole text.
const DeadLetterErrorMax = 4096

// DeadLetter is one entry of the dead-letter stream (stream:orchestrator:dlq). Like every
// entry it only points at a job: the job row (status dead_letter) is the truth, and the entry
// carries enough to read the queue with redis-cli.
type DeadLetter struct {
	ID           string // the entry id (set by AddDeadLetters and ListDeadLetters)
	JobID        string
	OriginStream string // the stream the job was delivered on
	Type         string
	Attempts     int
	LastError    string
}

// AddDeadLetters appends the entries to the DLQ stream in one pipeline and returns their ids in
// order. On error some entries may have been written; the caller deletes or reuses them.
func (c *Client) AddDeadLetters(ctx context.Context, dls []DeadLetter) ([]string, error) {
	if len(dls) == 0 {
		return nil, nil
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(dls))
	for i, d := range dls {
		lastErr := d.LastError
		if len(lastErr) > DeadLetterErrorMax {
			lastErr = strings.ToValidUTF8(lastErr[:DeadLetterErrorMax], "") // no half rune at the cut
		}
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: c.StreamKey(DLQStream),
			Values: []any{
				fieldJobID, d.JobID, fieldOriginStream, d.OriginStream, fieldType, d.Type,
				fieldAttempts, strconv.Itoa(d.Attempts), fieldLastError, lastErr,
			},
		})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("add %d dead letters: %w", len(dls), err)
	}
	ids := make([]string, len(dls))
	for i, cmd := range cmds {
		ids[i] = cmd.Val()
	}
	return ids, nil
}

// ListDeadLetters returns up to count entries of the DLQ stream with ids after `after` ("" for
// the beginning), oldest first.
func (c *Client) ListDeadLetters(ctx context.Context, after string, count int) ([]DeadLetter, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	msgs, err := c.rdb.XRangeN(ctx, c.StreamKey(DLQStream), start, "+", int64(count)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(msgs))
	for _, m := range msgs {
		d := DeadLetter{ID: m.ID}
		d.JobID, _ = m.Values[fieldJobID].(string)
		d.OriginStream, _ = m.Values[fieldOriginStream].(string)
		d.Type, _ = m.Values[fieldType].(string)
		d.LastError, _ = m.Values[fieldLastError].(string)
		if a, ok := m.Values[fieldAttempts].(string); ok {
			d.Attempts, _ = strconv.Atoi(a)
		}
		out = append(out, d)
	}
	return out, nil
}

// DeleteDeadLetters removes entries from the DLQ stream (XDEL) and returns how many existed.
func (c *Client) DeleteDeadLetters(ctx context.Context, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := c.rdb.XDel(ctx, c.StreamKey(DLQStream), ids...).Result()
	if err != nil {
		return 0, fmt.Errorf("delete %d dead letters: %w", len(ids), err)
	}
	return n, nil
}

// DeadLettersExist reports which of the DLQ entry ids still exist, so that a recovery after a
// Redis data loss republishes only the dead letters whose entries are gone.
func (c *Client) DeadLettersExist(ctx context.Context, ids []string) (map[string]bool, error) {
	return c.EntriesExist(ctx, DLQStream, ids)
}

// EntriesExist reports which of the entry ids still exist in stream (one pipelined XRANGE per
// id).
func (c *Client) EntriesExist(ctx context.Context, stream string, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.XRangeN(ctx, c.StreamKey(stream), id, id, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("look up %d entries of %s: %w", len(ids), stream, err)
	}
	for i, id := range ids {
		msgs, err := cmds[i].Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("look up entry %s of %s: %w", id, stream, err)
		}
		out[id] = len(msgs) > 0
	}
	return out, nil
}
