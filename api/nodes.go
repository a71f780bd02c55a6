package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/nodes"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

// cordonBodyBytes bounds a cordon's body: a reason of nodes.ReasonMax bytes, escaped.
const cordonBodyBytes = 8 << 10

// nodesOf is opts.Nodes, or the node registry's service over the options' store when it is a
// whole store.Store (the process wiring and every test server pass one); nil otherwise.
func nodesOf(opts Options) *nodes.Service {
	if opts.Nodes != nil {
		return opts.Nodes
	}
	st, ok := opts.Store.(store.Store)
	if !ok || opts.Leases == nil {
		return nil
	}
	return nodes.NewService(st, opts.Leases, nil)
}

// nodesEnabled answers 503 when the server runs without the node registry (a server built
// without a store).
func (s *Server) nodesEnabled(c *gin.Context) {
	if s.nodes == nil {
		s.writeError(c, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "the node registry is not enabled on this server"})
		return
	}
	c.Next()
}

// listNodes handles GET /nodes: every node with its labels, status, GPUs, workers and active
// leases.
func (s *Server) listNodes(c *gin.Context) {
	vs, err := s.nodes.List(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	who := mustIdentity(c)
	out := wire.NodeList{Nodes: make([]wire.Node, 0, len(vs))}
	for _, v := range vs {
		out.Nodes = append(out.Nodes, nodeToWire(v, who))
	}
	c.JSON(http.StatusOK, out)
}

// getNode handles GET /nodes/{id}; 404 for a node nothing knows.
func (s *Server) getNode(c *gin.Context) {
	id, ok := s.nodeID(c)
	if !ok {
		return
	}
	v, err := s.nodes.Get(c.Request.Context(), id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, nodeToWire(v, mustIdentity(c)))
}

// cordonNode handles POST /nodes/{id}/cordon: the scheduler places nothing new on the node;
// what runs there goes on. Audited node.cordoned with the admin and the reason.
func (s *Server) cordonNode(c *gin.Context) { s.setCordon(c, true) }

// uncordonNode handles POST /nodes/{id}/uncordon. Audited node.uncordoned.
func (s *Server) uncordonNode(c *gin.Context) { s.setCordon(c, false) }

func (s *Server) setCordon(c *gin.Context, cordoned bool) {
	id, ok := s.nodeID(c)
	if !ok {
		return
	}
	var req wire.CordonRequest
	if c.Request.ContentLength != 0 { // the body is optional
		if err := decodeJSON(c, cordonBodyBytes, &req); err != nil {
			s.writeError(c, err)
			return
		}
	}
	if len(req.Reason) > nodes.ReasonMax {
		s.writeError(c, badRequest("reason", "at most %d bytes, not %d", nodes.ReasonMax, len(req.Reason)))
		return
	}
	who := mustIdentity(c)
	v, err := s.nodes.SetCordon(c.Request.Context(), id, cordoned, req.Reason, who.Actor())
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, nodeToWire(v, who))
}

// nodeID is the path's node id, or false after a 400.
func (s *Server) nodeID(c *gin.Context) (string, bool) {
	id := c.Param("id")
	if !ident.ID.MatchString(id) {
		s.writeError(c, badID("id", ident.ID))
		return "", false
	}
	return id, true
}

func nodeToWire(v nodes.View, who Identity) wire.Node {
	out := wire.Node{ID: v.ID, Labels: v.Labels, Status: v.Status, GPUs: make([]wire.GPU, 0, len(v.GPUs)),
		Workers: make([]wire.NodeWorker, 0, len(v.Workers)), ActiveLeases: len(v.Leases),
		Leases: make([]wire.NodeLease, 0, len(v.Leases)), Cordoned: v.Cordoned, CordonReason: v.CordonReason,
		CordonedBy: v.CordonedBy, CordonedAt: v.CordonedAt}
	if !v.FirstSeen.IsZero() {
		first, last := v.FirstSeen.UTC(), v.LastSeen.UTC()
		out.FirstSeen, out.LastSeen = &first, &last
	}
	for _, g := range v.GPUs {
		out.GPUs = append(out.GPUs, gpuToWire(g))
	}
	for _, w := range v.Workers {
		out.Workers = append(out.Workers, wire.NodeWorker{WorkerID: w.ID, PoolID: w.PoolID, Status: string(w.Status),
			Types: w.Types})
	}
	scope := agentScope(who)
	for _, l := range v.Leases {
		nl := wire.NodeLease{Mode: string(l.Mode), MemoryMB: l.MemoryMB, GPUIndexes: l.GPUIndexes}
		if scope == "" || scope == l.Agent {
			// Whose lease and which job only to an admin and to the lease's own agent: another
			// agent's token sees the room taken, not the work.
			nl.Agent, nl.JobID, nl.LeaseToken = l.Agent, l.JobID, l.Token
		}
		out.Leases = append(out.Leases, nl)
	}
	return out
}

// gpuToWire is a GPU as GET /gpus and GET /nodes show it.
func gpuToWire(g leases.GPUStatus) wire.GPU {
	return wire.GPU{
		NodeID: g.NodeID, Index: g.Index, UUID: g.UUID, Name: g.Name,
		MemoryTotalMB: g.MemoryTotalMB, MemoryUsedMB: g.MemoryUsedMB, MemoryReservedMB: g.ReservedMB,
		MemoryFreeMB: g.FreeMB, UtilizationPct: g.UtilizationPct, TemperatureC: g.TemperatureC,
		PowerWatts: g.PowerWatts, ActiveLeases: g.Leases, Exclusive: g.Exclusive, Lost: g.Lost,
		LostReason: g.LostReason, Source: g.Source, UpdatedAt: g.UpdatedAt.UTC(),
		AgeSeconds: g.Age.Seconds(), Fresh: g.Fresh,
	}
}
