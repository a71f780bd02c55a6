package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/wire"
)

// listGPUs handles GET /gpus?node_id=: every GPU's latest telemetry with what active leases
// reserve on it, what placement would still hand out (free = total − max(used, reserved) −
// margin), and the telemetry's age. Lost GPUs are listed (lost: true); placement skips them
// and GPUs whose telemetry is not fresh.
func (s *Server) listGPUs(c *gin.Context) {
	node := c.Query("node_id")
	if node != "" && !ident.ID.MatchString(node) {
		s.writeError(c, badID("node_id", ident.ID))
		return
	}
	gpus, err := s.leases.GPUs(c.Request.Context(), node)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.GPUList{GPUs: make([]wire.GPU, 0, len(gpus))}
	for _, g := range gpus {
		out.GPUs = append(out.GPUs, gpuToWire(g))
	}
	c.JSON(http.StatusOK, out)
}
