package streams

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Node streams. The scheduler places a job on a node and publishes it to the node stream of its
// type (NodeStream): the type's stream name, ":", the node ("gpu_jobs:node-7"), or for a job
// routed to a pool, the node and the pool ("gpu_jobs:node-7@mistral", store.Target). The workers of
// that node (of that pool) read it in the type's consumer group beside the type's own stream,
// so no worker reads a job it cannot run. Every node stream published to is recorded in one set, for the loops that walk
// the streams (the reclaimer and the trimmer).

// nodeSep separates a type's stream name (lower case letters, digits and _, never ":") from
// the node (an identifier, which may hold ":"): the first one splits them.
const nodeSep = ":"

// NodeStream is the stream of stream's jobs placed on node.
func NodeStream(stream, node string) string { return stream + nodeSep + node }

// SplitNodeStream returns the type's stream and the node of a node stream; ok is false for
// any other stream.
func SplitNodeStream(name string) (stream, node string, ok bool) {
	stream, node, ok = strings.Cut(name, nodeSep)
	return stream, node, ok && stream != "" && node != ""
}

// TypeStream is the type's stream of name: the stream a node stream is of, or name itself.
func TypeStream(name string) string {
	if stream, _, ok := SplitNodeStream(name); ok {
		return stream
	}
	return name
}

// nodeStreamsKey is the set of the node streams published to.
func (c *Client) nodeStreamsKey() string { return c.prefix + "orchestrator:node_streams" }

// Wake topics: the pub/sub channels that wake a loop of the leader's from any instance.
const (
	// TopicSchedule wakes the scheduler.
	TopicSchedule = "schedule"
	// TopicFlows wakes the flows' resolver.
	TopicFlows = "flows"
)

// wakeChannel is the pub/sub channel of a wake topic.
func (c *Client) wakeChannel(topic string) string { return c.prefix + "orchestrator:" + topic }

// NodeStreams returns the node streams published to so far (stream names), sorted.
func (c *Client) NodeStreams(ctx context.Context) ([]string, error) {
	names, err := c.rdb.SMembers(ctx, c.nodeStreamsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("list node streams: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

// WakeScheduler tells the leader's scheduler, whichever instance runs it, that GPU work or
// room may be waiting (PUBLISH; nobody listening is fine).
func (c *Client) WakeScheduler(ctx context.Context) error { return c.Wake(ctx, TopicSchedule) }

// SchedulerWakes subscribes to WakeScheduler's channel (Wakes).
func (c *Client) SchedulerWakes(ctx context.Context) (wakes <-chan struct{}, closeFn func()) {
	return c.Wakes(ctx, TopicSchedule)
}

// Wake tells the loop of topic, whichever instance runs it, that it may have work (PUBLISH;
// nobody listening is fine).
func (c *Client) Wake(ctx context.Context, topic string) error {
	if err := c.rdb.Publish(ctx, c.wakeChannel(topic), "1").Err(); err != nil {
		return fmt.Errorf("wake %s: %w", topic, err)
	}
	return nil
}

// Wakes subscribes to topic's channel: each message sends on the returned channel (dropped
// when a wake is already waiting). close ends the subscription.
func (c *Client) Wakes(ctx context.Context, topic string) (wakes <-chan struct{}, closeFn func()) {
	sub := c.rdb.Subscribe(ctx, c.wakeChannel(topic))
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range sub.Channel() {
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, func() {
		_ = sub.Close()
		<-done
	}
}
