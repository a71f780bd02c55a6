package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Entry fields.
const (
	fieldJobID   = "job_id"
	fieldType    = "type"
	fieldAttempt = "attempt"
	// fieldTraceParent is the W3C trace context of the publisher (package tracing), so that
	// one trace covers the submit and the worker's run.
	fieldTraceParent = "traceparent"
	// fieldPriority is the job's priority, written only when above 0.
	fieldPriority = "priority"
)

// Client wraps a go-redis client with the orchestrator's stream operations.
type Client struct {
	rdb    redis.UniversalClient
	prefix string
}

// Options configure New.
type Options struct {
	// Prefix is put before every key (tests use a random one to share a Redis).
	Prefix string
}

// New returns a Client over rdb. rdb must have ContextTimeoutEnabled so a blocking read honours
// its context deadline.
func New(rdb redis.UniversalClient, opts Options) *Client {
	return &Client{rdb: rdb, prefix: opts.Prefix}
}

// NewRedis opens a go-redis client with the settings the stream calls rely on. Its errors
// that say Redis cannot serve now are marked ErrUnavailable (MapErrors).
func NewRedis(addr, password string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  addr,
		Password:              password,
		ContextTimeoutEnabled: true,
		DialTimeout:           3 * time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		PoolSize:              64,
		MinIdleConns:          4,
	})
	MapErrors(rdb)
	return rdb
}

// Redis returns the underlying client.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// Ping checks that Redis answers.
func (c *Client) Ping(ctx context.Context) error { return c.rdb.Ping(ctx).Err() }

// Message asks a worker to look at a job.
type Message struct {
	Stream  string // stream name (not the key)
	JobID   string
	Type    string
	Attempt int // the job's attempts at publication (what the next claim will find)
	// TraceParent is the W3C traceparent of the publishing span; empty: none.
	TraceParent string
	// Priority is the job's priority (0..9), which a worker orders the jobs it waits to place by.
	Priority int
}

// Publish appends every message to its stream in one pipeline and returns the entry IDs in order.
// On error some entries may have been written: duplicates are harmless, as claiming is a
// compare-and-set on the job row.
func (c *Client) Publish(ctx context.Context, msgs []Message) ([]string, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	nodes := map[string]bool{} // the node streams recorded by this pipeline
	for i, m := range msgs {
		values := []any{fieldJobID, m.JobID, fieldType, m.Type, fieldAttempt, strconv.Itoa(m.Attempt)}
		if m.TraceParent != "" {
			values = append(values, fieldTraceParent, m.TraceParent)
		}
		if m.Priority > 0 {
			values = append(values, fieldPriority, strconv.Itoa(m.Priority))
		}
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: c.StreamKey(m.Stream), Values: values})
		if _, _, ok := SplitNodeStream(m.Stream); ok && !nodes[m.Stream] {
			nodes[m.Stream] = true
			pipe.SAdd(ctx, c.nodeStreamsKey(), m.Stream)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("publish %d entries: %w", len(msgs), err)
	}
	ids := make([]string, len(msgs))
	for i, cmd := range cmds {
		ids[i] = cmd.Val()
	}
	return ids, nil
}

// EnsureGroup creates the consumer group on the stream (and the stream) when missing. A new group
// starts at the beginning of the stream so entries published before it existed are delivered.
func (c *Client) EnsureGroup(ctx context.Context, stream, group string) error {
	err := c.rdb.XGroupCreateMkStream(ctx, c.StreamKey(stream), group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create group %s on %s: %w", group, stream, err)
	}
	return nil
}

// Delivery is one entry read from a consumer group.
type Delivery struct {
	Stream string // stream name
	Group  string
	ID     string // entry ID
	JobID  string
	Type   string
	// Attempt is the attempt count at publication; -1 when the entry did not carry one.
	Attempt int
	// TraceParent is the publisher's W3C trace context; empty when the entry carries none.
	TraceParent string
	// Priority is the job's priority at publication (0 when the entry carries none).
	Priority int
}

// ReadParams select what Read waits for. Every stream is read through Group.
type ReadParams struct {
	Group    string
	Consumer string
	Streams  []string // stream names
	Count    int
	Block    time.Duration
}

// Read waits up to Block for new entries (XREADGROUP ... >) and returns them. It returns no
// deliveries and no error when nothing arrived in time. Entries with a missing job_id are
// returned with an empty JobID so the caller can ack them.
func (c *Client) Read(ctx context.Context, p ReadParams) ([]Delivery, error) {
	keys := make([]string, 0, 2*len(p.Streams))
	for _, s := range p.Streams {
		keys = append(keys, c.StreamKey(s))
	}
	for range p.Streams {
		keys = append(keys, ">")
	}
	res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group:    p.Group,
		Consumer: p.Consumer,
		Streams:  keys,
		Count:    int64(p.Count),
		Block:    p.Block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read group %s: %w", p.Group, err)
	}
	var out []Delivery
	for _, s := range res {
		name := strings.TrimPrefix(s.Stream, c.prefix+keyPrefix)
		for _, m := range s.Messages {
			out = append(out, c.delivery(name, p.Group, m))
		}
	}
	return out, nil
}

func (c *Client) delivery(stream, group string, m redis.XMessage) Delivery {
	d := Delivery{Stream: stream, Group: group, ID: m.ID, Attempt: -1}
	d.JobID, _ = m.Values[fieldJobID].(string)
	d.Type, _ = m.Values[fieldType].(string)
	d.TraceParent, _ = m.Values[fieldTraceParent].(string)
	if a, ok := m.Values[fieldAttempt].(string); ok {
		if n, err := strconv.Atoi(a); err == nil {
			d.Attempt = n
		}
	}
	if p, ok := m.Values[fieldPriority].(string); ok {
		d.Priority, _ = strconv.Atoi(p)
	}
	return d
}

// Ack acknowledges entries (XACK), grouped per stream and group, in one pipeline.
func (c *Client) Ack(ctx context.Context, ds []Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	type sg struct{ stream, group string }
	ids := map[sg][]string{}
	for _, d := range ds {
		k := sg{d.Stream, d.Group}
		ids[k] = append(ids[k], d.ID)
	}
	pipe := c.rdb.Pipeline()
	for k, v := range ids {
		pipe.XAck(ctx, c.StreamKey(k.stream), k.group, v...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("ack %d entries: %w", len(ds), err)
	}
	return nil
}

// Touch resets the idle time of entries this consumer holds (XCLAIM ... JUSTID to itself), so the
// reclaimer leaves entries of jobs that are still running alone.
func (c *Client) Touch(ctx context.Context, consumer string, ds []Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	pipe := c.rdb.Pipeline()
	for _, d := range ds {
		pipe.XClaimJustID(ctx, &redis.XClaimArgs{
			Stream:   c.StreamKey(d.Stream),
			Group:    d.Group,
			Consumer: consumer,
			MinIdle:  0,
			Messages: []string{d.ID},
		})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("touch %d entries: %w", len(ds), err)
	}
	return nil
}

// PendingCount returns how many entries of the group are delivered but not acknowledged.
func (c *Client) PendingCount(ctx context.Context, stream, group string) (int64, error) {
	res, err := c.rdb.XPending(ctx, c.StreamKey(stream), group).Result()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			return 0, nil
		}
		return 0, fmt.Errorf("pending of %s/%s: %w", stream, group, err)
	}
	return res.Count, nil
}

// Len returns the number of entries in the stream.
func (c *Client) Len(ctx context.Context, stream string) (int64, error) {
	n, err := c.rdb.XLen(ctx, c.StreamKey(stream)).Result()
	if err != nil {
		return 0, fmt.Errorf("length of %s: %w", stream, err)
	}
	return n, nil
}
