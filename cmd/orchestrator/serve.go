package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuorch/orchestrator/admission"
	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/reclaimer"
	"github.com/gpuorch/orchestrator/scheduler"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/tracing"
)

// startupWait bounds how long serve waits for MariaDB at start before giving up.
const startupWait = 2 * time.Minute

func serveCmd() *cobra.Command {
	var embedded bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the API and the engine against MariaDB and Redis",
		Long: "serve runs the API and the engine against MariaDB and Redis. With --embedded it runs " +
			"them on the embedded single-node backends instead (SQLite in data_dir and an in-process " +
			"Redis, as `orchestrator dev` does, but with no in-process worker): one GPU host, " +
			"workers started separately.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			log := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat)
			ctx, stop := shutdownOnSignal(cmd.Context(), log, cfg.ShutdownGrace, os.Exit)
			defer stop()
			var opts serverOptions
			if embedded {
				opts.open = embeddedOpener(nil)
			}
			return runServer(ctx, cfg, log, opts)
		},
	}
	cmd.Flags().BoolVar(&embedded, "embedded", false, "use SQLite in data_dir and an in-process Redis instead of MariaDB and Redis")
	return cmd
}

// serverOptions are what dev mode changes about serve.
type serverOptions struct {
	// allowLoopback lets unauthenticated loopback requests in as admin when no token exists.
	allowLoopback bool
	// ready is called once the API listens (dev mode prints its banner and starts workers). The
	// function it returns is called at shutdown, before the API stops, and waits for what ready
	// started to drain (workers still need the API to report their last results).
	ready func(ctx context.Context, c *core, self selfAPI) (wait func(), err error)
	// open opens the store and Redis (default openBackends: MariaDB and the configured Redis;
	// the embedded mode: SQLite and an in-process Redis).
	open func(ctx context.Context, cfg *config.Config, log *slog.Logger) (*backends, error)
}

// runServer migrates, wires the engine and serves the API until ctx ends, then shuts down
// gracefully: stop accepting, finish requests within the grace, stop the loops.
func runServer(ctx context.Context, cfg *config.Config, log *slog.Logger, opts serverOptions) error {
	log.Info("starting orchestrator", "version", versionString(), "http_addr", cfg.HTTPAddr, "node_id", cfg.NodeID)
	// Before anything opens: a tokens setting that holds no token, or a tokenless dev mode on
	// an address other than loopback, is a configuration error.
	auth, err := loadAuth(cfg, os.Getenv(api.TokensEnv), opts.allowLoopback)
	if err != nil {
		return err
	}
	serverTLS, err := api.ServerTLS(cfg.TLS)
	if err != nil {
		return err
	}
	open := opts.open
	if open == nil {
		open = openBackends
	}
	be, err := open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer be.close()
	log.Info("backends open", "backends", be.describe)
	stopTracing, err := startTracing(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	log = tracing.WithLogs(log) // trace_id on records logged with a span

	c, err := startCore(ctx, cfg, be, log)
	if err != nil {
		return err
	}
	defer c.stop()
	srv := buildAPI(ctx, cfg, auth, be, c, log)
	hs, addr, serveErr, err := listenAPI(cfg, srv.Handler(), serverTLS, log)
	if err != nil {
		return err
	}
	drain := func() {}
	if opts.ready != nil {
		if drain, err = startReady(ctx, cfg, opts.ready, c, addr, serverTLS); err != nil {
			_ = hs.Close()
			return err
		}
	}
	if err := serveUntilDone(ctx, serveErr); err != nil {
		return err
	}
	shutdown(ctx, cfg, log, hs, drain, c.eng)
	return nil
}

// core is the engine and what runs beside it, whatever the API: the leader election and the
// leader's loops, the lease loops, admission control and the pools, with their metrics.
type core struct {
	eng   *engine.Engine
	st    store.Store
	sc    *streams.Client
	lm    *leases.Manager
	om    *metrics.Registry
	el    leader.Elector
	adm   *admission.Controller
	pools *pools.Service
	hooks *hookWork
	// stop stops what startCore started, in reverse order: the lease loops, the election
	// (resigning first: a follower takes over within one interval), then admission, whose
	// policies' GPU quotas the scheduler and the grants read until then.
	stop func()
}

// startCore wires the engine over the opened backends and starts the work beside it. On an
// error, what it started is stopped again.
func startCore(ctx context.Context, cfg *config.Config, be *backends, log *slog.Logger) (_ *core, err error) {
	var started cleanups
	defer func() {
		if err != nil {
			started.run()
		}
	}()
	st := be.store
	sc := streams.New(be.redis, streams.Options{Prefix: cfg.RedisPrefix})
	ensureGroups(ctx, sc, cfg, log)

	// Rescues outside the leader loops (an eviction through the API) are fenced by the term
	// this instance leads in, and refused on a follower.
	var term currentTerm
	om := metrics.NewRegistry(log)
	// Admission first: its policies carry the agents' GPU quotas, which the lease grants and
	// the scheduler read from its cache.
	adm, stopAdmission, err := startAdmission(ctx, cfg, st, be.redis, om, log)
	if err != nil {
		return nil, err
	}
	started.push(stopAdmission)
	jm := engine.NewMetrics(cfg.TypeNames())
	// A submit of GPU jobs, a release of GPU leases and a telemetry report wake the leader's
	// scheduler, wherever it runs.
	waker := scheduler.NewWaker(sc, log)
	// The end of a job others wait for wakes the leader's resolver, wherever it runs.
	flowWaker := scheduler.NewTopicWaker(sc, streams.TopicFlows, log)
	lm := engine.NewLeaseManager(st, cfg, leases.Options{Logger: log, Recorded: func(string) { waker.Wake() },
		Quotas: adm.Quota})
	var local localTelemetry // set by startLeaseLoops
	freed := local.freed(cfg.NodeID)
	eng := engine.New(st, sc, cfg, engine.Options{Logger: log, Fence: term.fence, Observer: jm, Leases: lm,
		GPUFreed: func(node string) { freed(node); waker.Wake() }, WakeScheduler: waker.Wake, WakeFlows: flowWaker.Wake})
	started.push(startPolicyRefresher(ctx, cfg, eng, log))
	sm := scheduler.NewMetrics(cfg.TypeNames())
	if err := om.Register(sm); err != nil {
		return nil, fmt.Errorf("register scheduler metrics: %w", err)
	}
	rm := reclaimer.NewMetrics(reclaimer.GroupsOf(cfg)...)
	if err := om.Register(rm); err != nil {
		return nil, fmt.Errorf("register reclaimer metrics: %w", err)
	}
	pw, err := startPoolWork(cfg, st, sc, eng, be.elector != nil, log)
	if err != nil {
		return nil, err
	}
	firer, err := schedulesLoop(cfg, st, eng, om, log)
	if err != nil {
		return nil, err
	}
	hooks, err := newHookWork(cfg, st, om, log)
	if err != nil {
		return nil, err
	}
	el, stopElection, err := startElection(ctx, cfg, be, log, term.track(leaderWork(cfg, st, eng, sc, rm, log, pw.leaderLoop,
		schedulerLoop(cfg, eng, waker, sm, log), firer, hooks.leaderLoop,
		resolverLoop(cfg, eng, flowWaker, log), approvalExpirerLoop(cfg, eng, log))))
	if err != nil {
		return nil, err
	}
	started.push(stopElection)
	if err := registerMetrics(om, cfg, st, sc, lm, el, jm); err != nil {
		return nil, err
	}
	stopLeaseLoops, err := startLeaseLoops(ctx, cfg, lm, &local, log)
	if err != nil {
		return nil, err
	}
	started.push(stopLeaseLoops)
	return &core{eng: eng, st: st, sc: sc, lm: lm, om: om, el: el, adm: adm, pools: pw.svc, hooks: hooks, stop: started.run}, nil
}

// startElection starts the election that runs work while this process leads. The embedded
// mode's elector leads already and only gets the work; serve elects among its peers on
// MariaDB, over a connection pool of the elector's own. stop resigns, then closes that pool.
func startElection(ctx context.Context, cfg *config.Config, be *backends, log *slog.Logger,
	work func(ctx context.Context, term int64)) (el leader.Elector, stop func(), err error) {
	if be.elector != nil {
		be.setLeaderWork(work)
		return be.elector, be.elector.Stop, nil
	}
	el, closeEl, err := newMySQLElector(cfg, be.store, log, work)
	if err != nil {
		return nil, nil, err
	}
	if err := el.Start(ctx); err != nil {
		closeEl()
		return nil, nil, fmt.Errorf("start leader election: %w", err)
	}
	return el, func() { el.Stop(); closeEl() }, nil
}

// cleanups are the stops of what was started, run last first.
type cleanups []func()

func (c *cleanups) push(f func()) { *c = append(*c, f) }

func (c cleanups) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// buildAPI builds the API server over the core, says loudly when no token is configured, and
// reloads the tokens file on SIGHUP.
func buildAPI(ctx context.Context, cfg *config.Config, auth api.AuthOptions, be *backends, c *core, log *slog.Logger) *api.Server {
	tokens := auth.Tokens
	if tokens.Len() == 0 {
		if auth.AllowUnauthenticatedLoopback {
			log.Warn("NO API TOKENS CONFIGURED: requests from loopback, for a loopback Host, are admitted as admin " +
				"without a token (dev mode only)")
		} else {
			log.Error("no API token is configured: every request will be refused with 401; create one with " +
				"`orchestrator token create --role admin` and add its line to the tokens file (ORCH_TOKENS_FILE)")
		}
	}
	srv := api.New(api.Options{
		Engine:    c.eng,
		Config:    cfg,
		Store:     c.st,
		Streams:   c.sc,
		Leases:    c.lm,
		Auth:      auth,
		Logger:    log,
		Leader:    c.el,
		Metrics:   c.om,
		Admission: c.adm,
		Pools:     c.pools,
		Database:  be.database,
		Webhooks:  c.hooks.svc,
		PreRun:    c.hooks.preRun,
	})
	reloadTokensOnHangup(ctx, srv, cfg.TokensFile, tokens, log)
	return srv
}

// listenAPI listens on http_addr and serves h there in the background, over HTTPS when
// serverTLS is set. It returns the server, the address it listens on, and the channel that
// receives the end of serving.
func listenAPI(cfg *config.Config, h http.Handler, serverTLS *tls.Config, log *slog.Logger) (*http.Server, string, <-chan error, error) {
	tcp, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	// A connection opened ahead of need waits as an idle one, not against ReadHeaderTimeout.
	ln := api.NewListener(tcp, api.IdleTimeout)
	hs := api.NewHTTPServer(cfg.HTTPAddr, h)
	hs.TLSConfig = serverTLS
	serveErr := make(chan error, 1)
	if hs.TLSConfig != nil {
		log.Info("API serves HTTPS", "client_ca", cfg.TLS.ClientCAFile != "", "require_worker_cert", cfg.TLS.RequireWorkerCert)
		go func() { serveErr <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- hs.Serve(ln) }()
	}
	addr := ln.Addr().String()
	log.Info("API listening", "http_addr", addr)
	return hs, addr, serveErr, nil
}

// startReady runs serverOptions.ready once the API listens on addr, and returns what waits for
// what it started to drain.
func startReady(ctx context.Context, cfg *config.Config, ready func(context.Context, *core, selfAPI) (func(), error),
	c *core, addr string, serverTLS *tls.Config) (drain func(), err error) {
	self, err := selfAPIOf(cfg, addr, serverTLS)
	if err != nil {
		return nil, err
	}
	return ready(ctx, c, self)
}

// serveUntilDone waits until ctx ends (a signal) or the API server fails.
func serveUntilDone(ctx context.Context, serveErr <-chan error) error {
	select {
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
	case <-ctx.Done():
	}
	return nil
}

// shutdown stops gracefully: what ready started drains first (workers still report their last
// results through the API), then the API finishes its requests within the grace, then the
// last submits' marks are written.
func shutdown(ctx context.Context, cfg *config.Config, log *slog.Logger, hs *http.Server, drain func(), eng *engine.Engine) {
	log.Info("shutting down", "grace", cfg.ShutdownGrace)
	drain()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("http shutdown incomplete", "error", err)
	}
	// The enqueued marks of the last submits: without them the next leader's dispatcher would
	// publish those jobs again (harmless duplicates).
	eng.FlushMarks(sctx)
	log.Info("stopped")
}

// loadAuth loads the API tokens (tokens_file and env, the value of ORCH_API_TOKENS; a setting
// that holds no token is an error, see api.LoadTokens) and decides tokenless mode: only when
// allowLoopback (dev mode) and no token is configured by any means, and then only on a
// loopback listen address.
func loadAuth(cfg *config.Config, env string, allowLoopback bool) (api.AuthOptions, error) {
	tokens, err := api.LoadTokens(cfg.TokensFile, env)
	if err != nil {
		return api.AuthOptions{}, err
	}
	tokenless := allowLoopback && tokens.Len() == 0
	if tokenless {
		if err := requireLoopback(cfg.HTTPAddr); err != nil {
			return api.AuthOptions{}, err
		}
	}
	return api.AuthOptions{Tokens: tokens, AllowUnauthenticatedLoopback: tokenless}, nil
}

// selfAPI is how code in this process calls its own API (dev mode's in-process worker).
type selfAPI struct {
	// addr is the address the API listens on.
	addr string
	// url is the base URL to call: https when the API serves TLS, a loopback host when it
	// listens on every address (localAPIURL).
	url string
	// tls trusts exactly the certificate the API serves and presents the worker certificate
	// of the tls section when one is configured (nil without TLS).
	tls *tls.Config
}

// selfAPIOf describes the API listening on addr with serverTLS (nil: plain HTTP).
func selfAPIOf(cfg *config.Config, addr string, serverTLS *tls.Config) (selfAPI, error) {
	u, err := localAPIURL(cfg, addr)
	if err != nil {
		return selfAPI{}, err
	}
	self := selfAPI{addr: addr, url: u}
	if serverTLS != nil {
		if self.tls, err = pinnedWorkerTLS(cfg.TLS, serverTLS); err != nil {
			return selfAPI{}, err
		}
	}
	return self, nil
}

// migrateAtStart creates the database when missing and applies pending migrations, waiting
// (with backoff) for MariaDB to come up. golang-migrate's lock serialises concurrent starts.
func migrateAtStart(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	deadline := time.Now().Add(startupWait)
	delay := 500 * time.Millisecond
	for {
		err := db.EnsureDatabase(ctx, cfg.MySQLDSN)
		if err == nil {
			var v uint
			v, _, err = db.MigrateMySQL(ctx, cfg.MySQLDSN, "up", log)
			if err == nil {
				log.Info("schema ready", "version", v)
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("migrate at start: %w", err)
		}
		log.Warn("database not ready, retrying", "error", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(startstop.Jitter(delay, 0.2)):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// ensureGroups creates the consumer group of every job type. Redis being down is not fatal:
// workers create the groups too, and the dispatcher publishes what could not be.
func ensureGroups(ctx context.Context, sc *streams.Client, cfg *config.Config, log *slog.Logger) {
	for _, name := range cfg.TypeNames() {
		jt := cfg.JobTypes[name]
		if err := sc.EnsureGroup(ctx, jt.Stream, streams.GroupName(name)); err != nil {
			log.Warn("cannot create consumer group yet", "type", name, "error", err)
		}
	}
}
