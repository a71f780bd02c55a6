// Package streams is the only package that talks to Redis Streams: it owns every key name, the
// publish, read, ack and claim calls and their pipelining. A stream entry says only "look at job
// X"; the job row in the database is the truth.
package streams

// Key names. Every key of the orchestrator is built here, behind an optional prefix that isolates
// tests (and tenants) sharing one Redis.

const (
	keyPrefix = "stream:orchestrator:"
	// DLQStream is the stream name of dead letters.
	DLQStream = "dlq"
	// ControlStream carries control events (preloads of pools, drains).
	ControlStream = "control"
)

// StreamKey is the Redis key of the stream named name (e.g. "inference_jobs").
func (c *Client) StreamKey(name string) string { return c.prefix + keyPrefix + name }

// GroupName is the consumer group of the workers of a job type.
func GroupName(jobType string) string { return "cg:" + jobType + ":workers" }

// Prefix returns the key prefix this client puts before every key.
func (c *Client) Prefix() string { return c.prefix }
