package engine

import (
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// cached is a value submit reads from the store again once ttl has passed, or when asked to:
// the registered nodes' labels and the pools change in minutes, submits arrive many a second.
type cached[T any] struct {
	mu   sync.Mutex
	read time.Time
	ok   bool
	val  T
}

// get returns the value, loading it when it was never read, is ttl old, or force.
func (c *cached[T]) get(now time.Time, ttl time.Duration, force bool, load func() (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && !force && now.Sub(c.read) < ttl {
		return c.val, nil
	}
	v, err := load()
	if err != nil {
		return v, err
	}
	c.val, c.read, c.ok = v, now, true
	return v, nil
}

// labelsByNode are the nodes' labels, by node id.
func labelsByNode(nodes []store.Node) map[string]map[string]string {
	out := make(map[string]map[string]string, len(nodes))
	for _, n := range nodes {
		out[n.ID] = n.Labels
	}
	return out
}

// poolsByID are the pools, by id.
func poolsByID(pools []store.Pool) map[string]store.Pool {
	out := make(map[string]store.Pool, len(pools))
	for _, p := range pools {
		out[p.ID] = p
	}
	return out
}
