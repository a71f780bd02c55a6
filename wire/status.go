package wire

import (
	"time"
)

// Status is the answer of GET /status: the cluster at a glance.
type Status struct {
	// Leader is the latest election, whichever instance won it.
	Leader *StatusLeader `json:"leader,omitempty"`
	// ThisInstanceLeads says whether the instance that answered is the leader.
	ThisInstanceLeads bool `json:"this_instance_leads"`
	// Queues are the streams of the configured job types.
	Queues []StatusQueue `json:"queues"`
	// Errors name the parts that could not be read (the rest is still shown).
	Errors map[string]string `json:"errors,omitempty"`
}

// StatusLeader is the leader of the cluster.
type StatusLeader struct {
	LeaderID  string    `json:"leader_id"`
	Term      int64     `json:"term"`
	Since     time.Time `json:"since"`
	RenewedAt time.Time `json:"renewed_at"`
}

// StatusQueue is one job type's stream.
type StatusQueue struct {
	Type   string `json:"type"`
	Stream string `json:"stream"`
	// Length is the number of entries in the stream (trimmed below what is still needed).
	Length int64 `json:"length"`
	// PendingEntries are delivered but not yet acknowledged (jobs being worked).
	PendingEntries int64 `json:"pending_entries"`
}
