package streams

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// PreloadsStream is the stream of preload events (stream:orchestrator:preloads): a pool was
// created or changed, and whatever warms models (the pool's workers, a model cache) should
// load its model now rather than at the first job.
const PreloadsStream = "preloads"

// EventPreload is the event field of a preload entry.
const EventPreload = "preload"

// Fields of a preload entry. It carries no job_id: a worker reading it as a job entry acks and
// drops it.
const (
	fieldEvent          = "event"
	fieldPoolID         = "pool_id"
	fieldAgentName      = "agent_name"
	fieldModelID        = "model_id"
	fieldAdapter        = "adapter"
	fieldVariant        = "variant"
	fieldTypes          = "types"
	fieldDesiredWorkers = "desired_workers"
	fieldTS             = "ts"
)

// Preload is one preload event: which pool wants which model warm on how many workers.
type Preload struct {
	ID             string // the entry id (set by ListPreloads)
	PoolID         string
	Agent          string
	ModelID        string
	Adapter        string
	Variant        string
	Types          []string
	DesiredWorkers int
	At             time.Time
}

// PublishPreload appends a preload event to the preloads stream and returns its entry id.
func (c *Client) PublishPreload(ctx context.Context, p Preload) (string, error) {
	id, err := c.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: c.StreamKey(PreloadsStream),
		Values: []any{
			fieldEvent, EventPreload, fieldPoolID, p.PoolID, fieldAgentName, p.Agent,
			fieldModelID, p.ModelID, fieldAdapter, p.Adapter, fieldVariant, p.Variant,
			fieldTypes, strings.Join(p.Types, ","), fieldDesiredWorkers, strconv.Itoa(p.DesiredWorkers),
			fieldTS, p.At.UTC().Format(time.RFC3339Nano),
		},
	}).Result()
	if err != nil {
		return "", fmt.Errorf("publish preload of pool %s: %w", p.PoolID, err)
	}
	return id, nil
}

// LatestPreload returns the newest preload event of pool among the last scan entries of the
// preloads stream; false when there is none.
func (c *Client) LatestPreload(ctx context.Context, pool string, scan int64) (Preload, bool, error) {
	msgs, err := c.rdb.XRevRangeN(ctx, c.StreamKey(PreloadsStream), "+", "-", scan).Result()
	if err != nil {
		return Preload{}, false, fmt.Errorf("read preloads of pool %s: %w", pool, err)
	}
	for _, m := range msgs {
		if ev, _ := m.Values[fieldEvent].(string); ev != EventPreload {
			continue
		}
		if p := preloadOf(m); p.PoolID == pool {
			return p, true, nil
		}
	}
	return Preload{}, false, nil
}

// ListPreloads returns up to count preload events, oldest first (for operators and tests;
// consumers read the stream through their own group).
func (c *Client) ListPreloads(ctx context.Context, count int64) ([]Preload, error) {
	msgs, err := c.rdb.XRangeN(ctx, c.StreamKey(PreloadsStream), "-", "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("list preloads: %w", err)
	}
	out := make([]Preload, 0, len(msgs))
	for _, m := range msgs {
		if ev, _ := m.Values[fieldEvent].(string); ev != EventPreload {
			continue
		}
		out = append(out, preloadOf(m))
	}
	return out, nil
}

// preloadOf reads a preload entry.
func preloadOf(m redis.XMessage) Preload {
	p := Preload{ID: m.ID}
	p.PoolID, _ = m.Values[fieldPoolID].(string)
	p.Agent, _ = m.Values[fieldAgentName].(string)
	p.ModelID, _ = m.Values[fieldModelID].(string)
	p.Adapter, _ = m.Values[fieldAdapter].(string)
	p.Variant, _ = m.Values[fieldVariant].(string)
	if types, _ := m.Values[fieldTypes].(string); types != "" {
		p.Types = strings.Split(types, ",")
	}
	n, _ := m.Values[fieldDesiredWorkers].(string)
	p.DesiredWorkers, _ = strconv.Atoi(n)
	ts, _ := m.Values[fieldTS].(string)
	p.At, _ = time.Parse(time.RFC3339Nano, ts)
	return p
}
