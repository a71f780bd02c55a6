// Package api is the orchestrator's HTTP API: the gin router, the handlers, bearer-token auth,
// strict input decoding and the mapping of errors to JSON answers (wire.ErrorBody).
//
// Handlers are thin: they authenticate, decode and check the input, convert between the wire
// types of package wire and the engine's types, and call the engine. Every decision about
// job state lives in the engine.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/admission"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/nodes"
	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/schedules"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/webhooks"
)

// HTTP server limits (NewHTTPServer).
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 30 * time.Second
	// WriteTimeout bounds a whole answer; the SSE feed will need its own exemption.
	WriteTimeout   = 60 * time.Second
	IdleTimeout    = 120 * time.Second
	MaxHeaderBytes = 64 << 10
)

// Options configure New.
type Options struct {
	// Engine runs the job lifecycle. Required.
	Engine *engine.Engine
	// Config, Store, Streams and Leases are required with an Engine: the configuration, what
	// the API reads of the database itself (the audit trail of the event feeds, the readiness
	// checks), what it reads of Redis (the queues of /status, the readiness check), and the
	// lease manager of the lease and GPU routes. The process wiring passes the same backends
	// the engine runs on.
	Config  *config.Config
	Store   Store
	Streams Queues
	Leases  *leases.Manager
	// Auth configures bearer-token authentication.
	Auth AuthOptions
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Leader answers /status's leader part (nil: not shown).
	Leader LeaderInfo
	// Metrics is the registry GET /metrics serves; New registers the request metrics (Metrics)
	// on it (nil: a private registry with the request and process metrics only).
	Metrics *metrics.Registry
	// Admission decides on submits and lease requests (nil: every request is admitted, and
	// /control/admission answers 404).
	Admission *admission.Controller
	// Pools serves the worker pools and the worker registry (nil: those routes answer 503).
	Pools *pools.Service
	// Nodes serves the node registry (nil: one over Store and Leases when Store is a whole
	// store.Store, as the process wiring and the test servers pass; else /nodes answers 503).
	Nodes *nodes.Service
	// Schedules manages the schedules (nil: one over Store, Engine and Config when Store is a
	// whole store.Store; else /schedules answers 503).
	Schedules *schedules.Service
	// Webhooks serves the webhook subscriptions and the callback secrets (nil: /webhooks
	// answers 503); PreRun calls the pre-run hooks for POST /internal/jobs/pre_run (nil:
	// every job runs).
	Webhooks *webhooks.Service
	PreRun   *webhooks.PreRun
	// Ready overrides the readiness checks of /readyz: it returns one entry per dependency, nil
	// when that dependency is fine. Default: database ping, applied migrations, Redis ping.
	Ready func(ctx context.Context) map[string]error
	// Database names the database check of the default Ready: CheckMySQL (the default) or
	// CheckSQLite (the embedded mode).
	Database string
}

// Store is the part of the database the API reads without the engine: the audit trail that
// the event feeds stream, and what the readiness check asks (store.Store has it).
type Store interface {
	AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEvent, error)
	Ping(ctx context.Context) error
	SchemaVersion(ctx context.Context) (version uint, dirty bool, err error)
}

// Queues is the part of Redis the API reads: the length and pending count of a stream for
// /status, and a ping for /readyz (*streams.Client has it).
type Queues interface {
	Ping(ctx context.Context) error
	Len(ctx context.Context, stream string) (int64, error)
	PendingCount(ctx context.Context, stream, group string) (int64, error)
}

// Server is the HTTP API. It is safe for concurrent use.
type Server struct {
	engine    *engine.Engine
	store     Store
	streams   Queues
	leases    *leases.Manager
	cfg       *config.Config
	auth      AuthOptions
	tokens    atomic.Pointer[Tokens] // the accepted tokens: auth.Tokens, then SetTokens
	log       *slog.Logger
	ready     func(ctx context.Context) map[string]error
	database  string // the name of the database check
	leader    LeaderInfo
	metrics   *metrics.Registry
	requests  *Metrics // registered on metrics
	admission *admission.Controller
	pools     *pools.Service
	nodes     *nodes.Service     // nil without a store.Store (nodesOf)
	schedules *schedules.Service // nil without a store.Store (schedulesOf)
	webhooks  *webhooks.Service
	preRun    *webhooks.PreRun
	handler   *gin.Engine
	feeds     feedCounter // the open event streams per token (events.go)
	// batchSlots holds a token per large POST /jobs/submit_batch being read or worked on
	// (config.SubmitBatchConcurrency, needsTurn); a batch waits at most batchWait for one.
	batchSlots chan struct{}
	batchWait  time.Duration
	// batchesActive counts the batches in progress and batchEnds those that ended; once none
	// has run for batchIdle, freeMemory returns the burst's memory to the system (afterBatch).
	batchesActive atomic.Int64
	batchEnds     atomic.Uint64
	batchIdle     time.Duration
	freeMemory    func()
}

var releaseMode sync.Once

// New builds the API server and its routes.
func New(opts Options) *Server {
	releaseMode.Do(func() { gin.SetMode(gin.ReleaseMode) })
	s := &Server{
		engine:   opts.Engine,
		cfg:      opts.Config,
		store:    opts.Store,
		streams:  opts.Streams,
		leases:   opts.Leases,
		auth:     opts.Auth,
		log:      logging.Component(opts.Logger, "api"),
		ready:    opts.Ready,
		database: cmp.Or(opts.Database, CheckMySQL),
		metrics:  metricsOf(opts),
		leader:   opts.Leader,
	}
	s.requests = mustRegisterMetrics(s.metrics)
	s.tokens.Store(opts.Auth.Tokens)
	s.admission = opts.Admission
	s.pools = opts.Pools
	s.nodes = nodesOf(opts)
	s.schedules = schedulesOf(opts)
	s.webhooks, s.preRun = opts.Webhooks, opts.PreRun
	slots := config.SubmitBatchConcurrencyDefault
	if s.cfg != nil && s.cfg.SubmitBatchConcurrency > 0 {
		slots = s.cfg.SubmitBatchConcurrency
	}
	s.batchSlots, s.batchWait = make(chan struct{}, slots), batchSlotWait
	s.batchIdle, s.freeMemory = batchIdleReturn, debug.FreeOSMemory
	if s.ready == nil {
		s.ready = s.checkDependencies
	}
	s.handler = s.routes()
	return s
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler { return s.handler }

// NewHTTPServer returns an http.Server for h with the timeouts and header limit the API wants:
// a slow or stuck client cannot hold a connection forever.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

func (s *Server) routes() *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(s.traceRequests, s.observe, s.recovery, s.logRequests, s.guardRequests)
	r.NoRoute(func(c *gin.Context) {
		s.writeError(c, notFound("no route %s %s", c.Request.Method, c.Request.URL.Path))
	})
	r.NoMethod(func(c *gin.Context) { s.writeError(c, methodNotAllowed(c)) }) // gin sets Allow

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)
	r.GET("/metrics", s.serveMetrics())

	agents := s.requireRole(RoleAgent, RoleAdmin)
	r.POST("/jobs/submit", agents, s.submit)
	r.POST("/jobs/submit_batch", agents, s.submitBatch)
	r.GET("/jobs", agents, s.listJobs)
	// An approver reads the job it decides on.
	viewers := s.requireRole(RoleAgent, RoleAdmin, RoleApprover)
	r.GET("/jobs/:id", viewers, s.getJob)
	r.POST("/jobs/:id/cancel", agents, s.cancelJob)
	r.GET("/jobs/:id/events", agents, s.jobEvents)
	r.GET("/events", s.requireRole(RoleAdmin), s.allEvents)
	approvers := s.requireRole(RoleApprover, RoleAdmin)
	r.GET("/approvals", approvers, s.listApprovals)
	r.POST("/jobs/:id/approve", approvers, s.approveJob)
	r.POST("/jobs/:id/reject", approvers, s.rejectJob)
	r.GET("/approvals/policies", approvers, s.listApprovalPolicies)
	r.PUT("/approvals/policies", s.requireRole(RoleAdmin), s.putApprovalPolicy)
	r.DELETE("/approvals/policies/:name", s.requireRole(RoleAdmin), s.deleteApprovalPolicy)
	r.POST("/workflows", agents, s.submitWorkflow)
	r.GET("/workflows", agents, s.listWorkflows)
	r.GET("/workflows/:id", agents, s.getWorkflow)
	r.POST("/workflows/:id/cancel", agents, s.cancelWorkflow)
	r.GET("/status", s.requireRole(RoleAgent, RoleWorker, RoleAdmin), s.status)

	r.GET("/dlq", s.requireRole(RoleAdmin), s.listDeadLetters)
	r.POST("/dlq/:job_id/replay", s.requireRole(RoleAdmin), s.replayDeadLetter)
	r.DELETE("/dlq/:job_id", s.requireRole(RoleAdmin), s.purgeDeadLetter)

	r.GET("/leases", agents, s.listLeases)
	r.POST("/leases", agents, s.grantLease)
	r.POST("/leases/:token/heartbeat", agents, s.heartbeatLease)
	r.POST("/leases/:token/release", agents, s.releaseLease)
	r.GET("/gpus", agents, s.listGPUs)
	r.GET("/nodes", agents, s.nodesEnabled, s.listNodes)
	r.GET("/nodes/:id", agents, s.nodesEnabled, s.getNode)
	r.POST("/nodes/:id/cordon", s.requireRole(RoleAdmin), s.nodesEnabled, s.cordonNode)
	r.POST("/nodes/:id/uncordon", s.requireRole(RoleAdmin), s.nodesEnabled, s.uncordonNode)

	r.GET("/control/admission", s.requireRole(RoleAdmin), s.getAdmission)
	r.PUT("/control/admission", s.requireRole(RoleAdmin), s.putAdmission)
	r.DELETE("/control/admission/:agent", s.requireRole(RoleAdmin), s.deleteAdmission)
	s.scheduleRoutes(r)

	admins := s.requireRole(RoleAdmin)
	r.POST("/workers/pool", admins, s.poolsEnabled, s.createPool)
	r.GET("/workers/pools", agents, s.poolsEnabled, s.listPools)
	r.GET("/workers/pools/:id", agents, s.poolsEnabled, s.getPool)
	r.POST("/workers/pools/:id/heartbeat", agents, s.poolsEnabled, s.heartbeatPool)
	r.POST("/workers/pools/:id/drain", admins, s.poolsEnabled, s.drainPool)
	r.POST("/control/drain", admins, s.poolsEnabled, s.drainAll)
	r.POST("/control/evict_pool", admins, s.poolsEnabled, s.evictPool)
	r.POST("/control/reconcile", admins, s.poolsEnabled, s.reconcile)

	r.POST("/webhooks", admins, s.webhooksEnabled, s.createWebhook)
	r.GET("/webhooks", admins, s.webhooksEnabled, s.listWebhooks)
	r.GET("/webhooks/callback_secret", agents, s.webhooksEnabled, s.callbackSecret)
	r.GET("/webhooks/:id", admins, s.webhooksEnabled, s.getWebhook)
	r.DELETE("/webhooks/:id", admins, s.webhooksEnabled, remove(s, s.webhookID, s.webhooks.Delete)) // its deliveries go with it
	r.POST("/webhooks/:id/enable", admins, s.webhooksEnabled, turn(s, s.webhookID, s.webhooks.SetEnabled, webhookToWire, true))
	r.POST("/webhooks/:id/disable", admins, s.webhooksEnabled, turn(s, s.webhookID, s.webhooks.SetEnabled, webhookToWire, false))
	r.GET("/webhooks/:id/deliveries", admins, s.webhooksEnabled, s.webhookDeliveries)

	workers := r.Group("/internal", s.requireWorkerCert, s.requireRole(RoleWorker, RoleAdmin))
	workers.POST("/jobs/pre_run", s.preRunJob)
	workers.POST("/jobs/claim", s.claim)
	workers.POST("/jobs/start", s.start)
	workers.POST("/jobs/complete", s.complete)
	workers.POST("/leases/renew", s.renewLeases)
	workers.POST("/workers/register", s.poolsEnabled, s.registerWorker)
	workers.POST("/workers/:id/heartbeat", s.poolsEnabled, s.workerHeartbeat)
	workers.POST("/workers/:id/deregister", s.poolsEnabled, s.deregisterWorker)
	s.initRouteMetrics(r)
	return r
}

// recovery turns a handler panic into a logged error and a JSON 500, keeping the process up.
func (s *Server) recovery(c *gin.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
			panic(v) // the standard "abort this response" signal; net/http handles it
		}
		s.log.Error("handler panicked", "route", c.FullPath(), "method", c.Request.Method,
			"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		if c.Writer.Written() {
			c.Abort()
			return
		}
		c.AbortWithStatusJSON(http.StatusInternalServerError, errorBody(errors.New("panic"), http.StatusInternalServerError, CodeInternal))
	}()
	c.Next()
}

// logRequests logs every request at debug level: route, status, duration. Never headers (the
// Authorization token) nor bodies (payloads).
func (s *Server) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	if !s.log.Enabled(c.Request.Context(), slog.LevelDebug) {
		return
	}
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	attrs := []any{"method", c.Request.Method, "route", route, "status", c.Writer.Status(),
		"duration", time.Since(start)}
	if id, ok := IdentityFrom(c); ok {
		attrs = append(attrs, "role", id.Role, "token_id", id.TokenID)
	}
	s.log.Debug("request", attrs...)
}
