package api

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// LeaderInfo is what /status needs of the leader elector (leader.Elector satisfies it).
type LeaderInfo interface {
	IsLeader() bool
	Term() int64
	Leader(ctx context.Context) (store.LeaderState, error)
}

// status handles GET /status (any role): leader, term, since, and the queues.
func (s *Server) status(c *gin.Context) {
	ctx := c.Request.Context()
	out := wire.Status{Queues: []wire.StatusQueue{}, Errors: map[string]string{}}
	if s.leader != nil {
		out.ThisInstanceLeads = s.leader.IsLeader()
		if st, err := s.leader.Leader(ctx); err != nil {
			s.log.Warn("status: read leader state", "error", err)
			out.Errors["leader"] = "unavailable"
		} else if st.Term > 0 {
			out.Leader = &wire.StatusLeader{LeaderID: st.LeaderID, Term: st.Term, Since: st.AcquiredAt.UTC(), RenewedAt: st.RenewedAt.UTC()}
		}
	}
	sc := s.streams
	for _, name := range s.cfg.TypeNames() {
		jt := s.cfg.JobTypes[name]
		q := wire.StatusQueue{Type: name, Stream: jt.Stream}
		var err error
		if q.Length, err = sc.Len(ctx, jt.Stream); err == nil {
			q.PendingEntries, err = sc.PendingCount(ctx, jt.Stream, streams.GroupName(name))
		}
		if err != nil {
			s.log.Warn("status: read queue", "stream", jt.Stream, "error", err)
			out.Errors["redis"] = "unavailable"
		}
		out.Queues = append(out.Queues, q)
	}
	if len(out.Errors) == 0 {
		out.Errors = nil
	}
	c.JSON(http.StatusOK, out)
}
