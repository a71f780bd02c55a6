package api

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
	"github.com/gpuorch/orchestrator/wire"
)

// maxTelemetryGPUs bounds the GPUs (usable and lost) of one node's telemetry.
const maxTelemetryGPUs = 256

// renewLeases handles POST /internal/leases/renew: a worker renews the leases of its in-flight
// jobs in one call, and reports its node's telemetry. The answer lists the leases renewed, the
// tokens that are gone (the worker stops those jobs: their results would be refused), and what
// leases reserve on each GPU of the node (for simulated GPUs that follow the reservations).
func (s *Server) renewLeases(c *gin.Context) {
	var req wire.RenewRequest
	if err := decodeJSON(c, internalBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	p, err := renewParams(req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	res, err := s.leases.Renew(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.RenewResponse{Renewed: make([]wire.RenewedLease, 0, len(res.Renewed)),
		Gone: make([]wire.GoneLease, 0, len(res.Gone))}
	for _, l := range res.Renewed {
		out.Renewed = append(out.Renewed, wire.RenewedLease{Token: l.Token, ExpiresAt: l.ExpiresAt.UTC()})
	}
	for _, g := range res.Gone {
		status := string(g.Status)
		switch g.Status {
		case "":
			status = "unknown"
		case store.LeaseActive: // past its expiry, not yet purged
			status = wire.LeaseExpired
		}
		out.Gone = append(out.Gone, wire.GoneLease{Token: g.Token, JobID: g.JobID, Status: status})
	}
	for idx, mb := range res.Reserved {
		out.Reserved = append(out.Reserved, wire.GPUReservation{GPUIndex: idx, ReservedMB: mb})
	}
	sort.Slice(out.Reserved, func(i, j int) bool { return out.Reserved[i].GPUIndex < out.Reserved[j].GPUIndex })
	c.JSON(http.StatusOK, out)
}

// renewParams checks a renew request and converts its telemetry.
func renewParams(req wire.RenewRequest) (leases.RenewParams, error) {
	if err := validateWorker(req.WorkerID); err != nil {
		return leases.RenewParams{}, err
	}
	if req.NodeID != "" && !ident.ID.MatchString(req.NodeID) {
		return leases.RenewParams{}, badID("node_id", ident.ID)
	}
	if len(req.Tokens) > leases.MaxRenewTokens {
		return leases.RenewParams{}, badRequest("tokens", "at most %d per call, got %d", leases.MaxRenewTokens, len(req.Tokens))
	}
	for i, t := range req.Tokens {
		if len(t) > leases.JobTokenMax {
			return leases.RenewParams{}, badRequest(fmt.Sprintf("tokens[%d]", i), "is longer than %d bytes", leases.JobTokenMax)
		}
	}
	p := leases.RenewParams{WorkerID: req.WorkerID, NodeID: req.NodeID, Tokens: req.Tokens}
	if t := req.Telemetry; t != nil {
		switch {
		case req.NodeID == "":
			return p, badRequest("node_id", "is required with telemetry")
		case t.NodeID != req.NodeID:
			return p, badRequest("telemetry.node_id", "must be the node_id of the call (%q)", req.NodeID)
		case t.Source != telemetry.SourceNVML && t.Source != telemetry.SourceSimulated && t.Source != telemetry.SourceNone:
			return p, badRequest("telemetry.source", "must be %q, %q or %q", telemetry.SourceNVML,
				telemetry.SourceSimulated, telemetry.SourceNone)
		case len(t.GPUs)+len(t.Lost) > maxTelemetryGPUs:
			return p, badRequest("telemetry.gpus", "at most %d GPUs per node", maxTelemetryGPUs)
		}
		snap := telemetry.Snapshot{NodeID: t.NodeID, Taken: t.Taken, Source: t.Source,
			DriverVersion: t.DriverVersion, CUDAVersion: t.CUDAVersion}
		seen := map[int]bool{}
		for i, g := range t.GPUs {
			field := fmt.Sprintf("telemetry.gpus[%d]", i)
			switch {
			case g.Index < 0 || seen[g.Index]:
				return p, badRequest(field+".index", "must be a distinct index >= 0")
			case g.MemoryTotalMB < 0 || g.MemoryUsedMB < 0:
				return p, badRequest(field+".memory_total_mb", "memory must not be negative")
			}
			seen[g.Index] = true
			snap.GPUs = append(snap.GPUs, telemetry.GPU{Index: g.Index, UUID: g.UUID, Name: g.Name,
				MemoryTotalMB: g.MemoryTotalMB, MemoryUsedMB: g.MemoryUsedMB,
				MemoryFreeMB: max(g.MemoryTotalMB-g.MemoryUsedMB, 0), UtilizationPct: g.UtilizationPct,
				TemperatureC: g.TemperatureC, PowerWatts: g.PowerWatts, MIG: g.MIG})
		}
		for i, g := range t.Lost {
			if g.Index < 0 || seen[g.Index] {
				return p, badRequest(fmt.Sprintf("telemetry.lost[%d].index", i), "must be a distinct index >= 0")
			}
			seen[g.Index] = true
			snap.Lost = append(snap.Lost, telemetry.LostGPU{Index: g.Index, UUID: g.UUID, Reason: g.Reason})
		}
		p.Snapshot = &snap
	}
	return p, nil
}
