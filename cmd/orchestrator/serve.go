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

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/reclaimer"
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
	ready func(ctx context.Context, eng *engine.Engine, self selfAPI) (wait func(), err error)
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
	st := be.store
	sc := streams.New(be.redis, streams.Options{Prefix: cfg.RedisPrefix})
	ensureGroups(ctx, sc, cfg, log)

	// Rescues outside the leader loops (an eviction through the API) are fenced by the term
	// this instance leads in, and refused on a follower.
	var term currentTerm
	om := metrics.NewOrchestrator(cfg, log)
	eng := engine.New(st, sc, cfg, engine.Options{Logger: log, Fence: term.fence, Observer: om.Jobs})
	rm := reclaimer.NewMetrics(reclaimer.GroupsOf(cfg)...)
	if err := om.Register(rm); err != nil {
		return fmt.Errorf("register reclaimer metrics: %w", err)
	}
	pw, err := startPoolWork(cfg, st, sc, eng, be.elector != nil, log)
	if err != nil {
		return err
	}
	work := term.track(leaderWork(cfg, eng, sc, rm, log, pw.leaderLoop))
	el := be.elector
	if el != nil {
		be.setLeaderWork(work) // the embedded mode's LocalElector already leads
	} else {
		var closeEl func()
		if el, closeEl, err = newMySQLElector(cfg, st, log, work); err != nil {
			return err
		}
		defer closeEl()
		if err := el.Start(ctx); err != nil {
			return fmt.Errorf("start leader election: %w", err)
		}
	}
	// Resign first at shutdown (deferred last): a follower takes over within one interval.
	defer el.Stop()
	if err := om.Watch(metrics.SourcesOf(eng, st, el)); err != nil {
		return err
	}
	stopLeaseLoops, err := startLeaseLoops(ctx, cfg, eng, log)
	if err != nil {
		return err
	}
	defer stopLeaseLoops()
	adm, stopAdmission, err := startAdmission(ctx, cfg, st, be.redis, om, log)
	if err != nil {
		return err
	}
	defer stopAdmission()

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
		Engine:    eng,
		Config:    cfg,
		Auth:      auth,
		Logger:    log,
		Leader:    el,
		Metrics:   om.Registry,
		Admission: adm,
		Pools:     pw.svc,
		Database:  be.database,
	})
	reloadTokensOnHangup(ctx, srv, cfg.TokensFile, tokens, log)
	tcp, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	// A connection opened ahead of need waits as an idle one, not against ReadHeaderTimeout.
	ln := api.NewListener(tcp, api.IdleTimeout)
	hs := api.NewHTTPServer(cfg.HTTPAddr, srv.Handler())
	hs.TLSConfig = serverTLS
	serveErr := make(chan error, 1)
	if hs.TLSConfig != nil {
		log.Info("API serves HTTPS", "client_ca", cfg.TLS.ClientCAFile != "", "require_worker_cert", cfg.TLS.RequireWorkerCert)
		go func() { serveErr <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- hs.Serve(ln) }()
	}
	log.Info("API listening", "http_addr", ln.Addr().String())

	drain := func() {}
	if opts.ready != nil {
		self, err := selfAPIOf(cfg, ln.Addr().String(), serverTLS)
		if err == nil {
			drain, err = opts.ready(ctx, eng, self)
		}
		if err != nil {
			_ = hs.Close()
			return err
		}
	}
	select {
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
	case <-ctx.Done():
	}
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
	return nil
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
