package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// poolWork is the pools' share of an orchestrator. The service (the pool and worker-registry
// API) and the provisioner live as long as the process: the workers a local provisioner
// started outlive a lost leadership and are still reaped here. The reconciler is leader-only
// work, one per term (leaderLoop, an extra loop of leaderWork).
type poolWork struct {
	svc  *pools.Service
	prov pools.Provisioner
	st   store.Store
	eng  *engine.Engine
	cfg  *config.Config
	log  *slog.Logger
}

// startPoolWork builds the pools service and the provisioner that pools.provisioner names:
// by default local in the embedded mode (one host, which the orchestrator supervises) and
// external with MariaDB (a cluster whose workers Kubernetes/KEDA or systemd run). A local
// provisioner whose worker binary is missing is not fatal: pools cannot start workers until it
// exists, and the log says so.
func startPoolWork(cfg *config.Config, st store.Store, sc *streams.Client, eng *engine.Engine, embedded bool, log *slog.Logger) (*poolWork, error) {
	pw := &poolWork{st: st, eng: eng, cfg: cfg, log: log,
		svc: pools.NewService(st, sc, cfg, pools.ServiceOptions{Logger: log})}
	name := cfg.Pools.Provisioner
	if name == "" {
		name = config.ProvisionerExternal
		if embedded {
			name = config.ProvisionerLocal
		}
	}
	if name == config.ProvisionerExternal {
		pw.prov = pools.ExternalProvisioner{}
		log.Info("worker pools: external provisioner (workers are started by something else; the leader reports and relays orders)")
		return pw, nil
	}
	local, err := newLocalProvisioner(cfg, pw.svc, log)
	if err != nil {
		return nil, err
	}
	pw.prov = local
	return pw, nil
}

// newLocalProvisioner configures the local provisioner: the worker binary, its log directory,
// and the environment that points the workers at this orchestrator (API, token, Redis,
// configuration file, node).
func newLocalProvisioner(cfg *config.Config, svc *pools.Service, log *slog.Logger) (*pools.LocalProvisioner, error) {
	bin := cfg.Pools.WorkerBinary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("worker pools: locate the worker binary: %w (set pools.worker_binary)", err)
		}
		bin = filepath.Join(filepath.Dir(exe), "worker")
	}
	if _, err := os.Stat(bin); err != nil {
		log.Warn("worker pools: the worker binary is missing; pools cannot start workers until it exists (pools.worker_binary, ORCH_WORKER_BINARY)",
			"worker_binary", bin, "error", err)
	}
	logDir := cfg.Pools.LogDir
	if logDir == "" {
		logDir = filepath.Join(cfg.DataDir, config.PoolsLogDirName)
	}
	apiURL, err := workerAPIURL(cfg)
	if err != nil {
		return nil, err
	}
	env := []string{
		"ORCH_API_URL=" + apiURL,
		"ORCH_REDIS_ADDR=" + cfg.RedisAddr,
		"ORCH_REDIS_PREFIX=" + cfg.RedisPrefix,
		"ORCH_NODE_ID=" + cfg.NodeID,
		// Several workers on one host: each serves its metrics on a port of its own.
		"ORCH_WORKER_METRICS_ADDR=127.0.0.1:0",
	}
	if cfg.Worker.APIToken != "" {
		env = append(env, "ORCH_API_TOKEN="+cfg.Worker.APIToken)
	} else {
		log.Info("worker pools: local workers get no API token (worker.api_token, ORCH_API_TOKEN is empty): " +
			"fine in dev mode, which admits loopback calls, refused (401) wherever tokens are configured")
	}
	if cfg.RedisPassword != "" {
		env = append(env, "ORCH_REDIS_PASSWORD="+cfg.RedisPassword)
	}
	if cfg.Path != "" {
		path, err := filepath.Abs(cfg.Path)
		if err != nil {
			return nil, fmt.Errorf("worker pools: configuration file %s: %w", cfg.Path, err)
		}
		env = append(env, "ORCH_CONFIG="+path)
	}
	local, err := pools.NewLocal(pools.LocalConfig{
		Binary:            bin,
		LogDir:            logDir,
		Env:               env,
		RestartBackoffMax: cfg.Pools.RestartBackoffMax,
		OnExit:            func() { svc.Reconcile() },
		Logger:            log,
	})
	if err != nil {
		return nil, fmt.Errorf("worker pools: %w", err)
	}
	log.Info("worker pools: local provisioner", "worker_binary", bin, "log_dir", logDir, "api_url", apiURL)
	return local, nil
}

// workerAPIURL is the address local workers call: pools.worker_api_url, else http_addr as
// localAPIURL makes it (https when the API serves TLS; the workers read the same tls section,
// and a certificate that does not name that host needs pools.worker_api_url).
func workerAPIURL(cfg *config.Config) (string, error) {
	if cfg.Pools.WorkerAPIURL != "" {
		return cfg.Pools.WorkerAPIURL, nil
	}
	u, err := localAPIURL(cfg, cfg.HTTPAddr)
	if err != nil {
		return "", fmt.Errorf("worker pools: derive the workers' API address: %w (set pools.worker_api_url)", err)
	}
	return u, nil
}

// localAPIURL is the base URL a worker on this host calls for the API listening on addr: a
// loopback host when addr is every address, https when the API serves TLS.
func localAPIURL(cfg *config.Config, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("http_addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	scheme := "http://"
	if cfg.TLS.Enabled() {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port), nil
}

// pinnedWorkerTLS is the TLS configuration of a worker inside this process (dev mode's): the
// client certificate local workers present (tls.client_cert_file and client_key_file, read by
// client.TLSConfig as cmd/worker does), and trust in exactly the certificate this process
// serves (serverTLS's), whoever signed it and whatever names it carries: the worker calls its
// own process, whose certificate it holds. A client CA the API requires of workers
// (tls.require_worker_cert) needs that client certificate.
func pinnedWorkerTLS(t config.TLS, serverTLS *tls.Config) (*tls.Config, error) {
	if t.RequireWorkerCert && t.ClientCertFile == "" {
		return nil, errors.New("tls.require_worker_cert: the in-process worker needs a client certificate " +
			"signed by tls.client_ca_file: set tls.client_cert_file and tls.client_key_file (ORCH_TLS_CLIENT_CERT, ORCH_TLS_CLIENT_KEY)")
	}
	if len(serverTLS.Certificates) == 0 || len(serverTLS.Certificates[0].Certificate) == 0 {
		return nil, errors.New("the API serves TLS without a certificate")
	}
	own := serverTLS.Certificates[0].Certificate[0]
	out, err := client.TLSConfig("", t.ClientCertFile, t.ClientKeyFile)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	// The usual verification (a chain to a root, a name) is replaced by the pin below, which
	// is stricter: one certificate, this process's own.
	out.InsecureSkipVerify = true
	out.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, own) {
			return errors.New("the API answered with a certificate other than the one this process serves")
		}
		return nil
	}
	return out, nil
}

// leaderLoop is the pools' extra loop of leaderWork: the reconciler of one term, fenced by it,
// reachable from POST /control/reconcile while it runs.
func (pw *poolWork) leaderLoop(_ int64, fence engine.Fence) loop {
	p := pw.cfg.Pools
	r := pools.NewReconciler(pw.st, pw.prov, pw.eng, pools.ReconcilerConfig{
		Interval:     p.ReconcileInterval,
		OfflineAfter: p.OfflineAfter(),
		DrainGrace:   p.DrainGrace,
		EvictGrace:   p.EvictGrace,
		StartTimeout: p.StartTimeout,
		Fence:        fence,
		Stagger:      true,
		Logger:       pw.log,
	})
	return &reconcilerLoop{r: r, svc: pw.svc}
}

// reconcilerLoop runs a term's reconciler and routes the service's wake-ups to it.
type reconcilerLoop struct {
	r   *pools.Reconciler
	svc *pools.Service
}

// Start starts the reconciler; it returns at once.
func (l *reconcilerLoop) Start(ctx context.Context) error {
	if err := l.r.Start(ctx); err != nil {
		return err
	}
	l.svc.SetWaker(l.r.Wake)
	return nil
}

// Stop stops the reconciler; idempotent.
func (l *reconcilerLoop) Stop() {
	l.svc.SetWaker(nil)
	l.r.Stop()
}
