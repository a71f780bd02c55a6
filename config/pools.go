package config

import (
	"cmp"
	"fmt"
	"time"
)

// Provisioners of worker pools (Pools.Provisioner).
const (
	// ProvisionerLocal: the leader starts and supervises the pools' worker processes on its
	// own host.
	ProvisionerLocal = "local"
	// ProvisionerExternal: something else (Kubernetes and KEDA, systemd) owns the worker
	// replicas; the leader only reports what it sees and relays drain and evict orders.
	ProvisionerExternal = "external"
)

// Defaults of the pools section.
const (
	// PoolsHeartbeatIntervalDefault is how often a worker heartbeats.
	PoolsHeartbeatIntervalDefault = 5 * time.Second
	// PoolsOfflineHeartbeatsDefault is how many heartbeat intervals of silence make a worker
	// offline.
	PoolsOfflineHeartbeatsDefault = 3
	// PoolsReconcileIntervalDefault is the pace of the leader's pool reconciler.
	PoolsReconcileIntervalDefault = 3 * time.Second
	// PoolsDrainGraceDefault is how long a draining pool's workers get to finish their jobs
	// before they are told to stop (and local ones are killed): above the workers' own
	// shutdown grace, so that a drain normally ends by itself.
	PoolsDrainGraceDefault = 60 * time.Second
	// PoolsEvictGraceDefault is how long an evicted local worker gets between SIGTERM and
	// SIGKILL.
	PoolsEvictGraceDefault = 5 * time.Second
	// PoolsRestartBackoffMaxDefault caps the delay before a crashed local worker is replaced.
	PoolsRestartBackoffMaxDefault = time.Minute
	// PoolsStartTimeoutDefault is how long a local worker may take to register before it is
	// killed and counted as a crash.
	PoolsStartTimeoutDefault = 60 * time.Second
	// PoolsLogDirName is the directory of local workers' logs under data_dir (the default of
	// pools.log_dir).
	PoolsLogDirName = "worker-logs"
)

// Pools configures worker pools, the worker registry and the local provisioner.
type Pools struct {
	// Provisioner is local or external (ORCH_POOLS_PROVISIONER). Empty: local in the embedded
	// mode (dev, serve --embedded: one host, the orchestrator is the natural supervisor),
	// external with MariaDB (a cluster whose workers Kubernetes/KEDA or systemd run).
	Provisioner string `yaml:"provisioner"`
	// WorkerBinary is the worker program the local provisioner starts (ORCH_WORKER_BINARY;
	// default: "worker" next to the orchestrator's binary).
	WorkerBinary string `yaml:"worker_binary"`
	// WorkerAPIURL is the API address local workers are given (default: http://http_addr,
	// with a loopback host when http_addr listens on every address).
	WorkerAPIURL string `yaml:"worker_api_url"`
	// LogDir holds the local workers' logs, one file per worker (default data_dir/worker-logs).
	LogDir string `yaml:"log_dir"`
	// HeartbeatInterval is how often workers heartbeat; the orchestrator tells them at
	// registration, so its value wins over the workers' own.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// OfflineHeartbeats is how many intervals of silence make a worker offline (its leases are
	// left to expire on their own).
	OfflineHeartbeats int `yaml:"offline_heartbeats"`
	// ReconcileInterval is the pace of the leader's reconciler (also run on POST /control/reconcile).
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	// DrainGrace bounds a drain: past it the remaining workers are told to stop, local ones killed.
	DrainGrace time.Duration `yaml:"drain_grace"`
	// EvictGrace is the time between SIGTERM and SIGKILL of an evicted local worker.
	EvictGrace time.Duration `yaml:"evict_grace"`
	// RestartBackoffMax caps the exponential delay before a crashed local worker is replaced.
	RestartBackoffMax time.Duration `yaml:"restart_backoff_max"`
	// StartTimeout is how long a local worker may take to register.
	StartTimeout time.Duration `yaml:"start_timeout"`
}

// OfflineAfter is how long a worker may stay silent before it is offline.
func (p Pools) OfflineAfter() time.Duration {
	return time.Duration(p.OfflineHeartbeats) * p.HeartbeatInterval
}

func (c *Config) fillPools() {
	p := &c.Pools
	p.HeartbeatInterval = cmp.Or(p.HeartbeatInterval, PoolsHeartbeatIntervalDefault)
	p.OfflineHeartbeats = cmp.Or(p.OfflineHeartbeats, PoolsOfflineHeartbeatsDefault)
	p.ReconcileInterval = cmp.Or(p.ReconcileInterval, PoolsReconcileIntervalDefault)
	p.DrainGrace = cmp.Or(p.DrainGrace, PoolsDrainGraceDefault)
	p.EvictGrace = cmp.Or(p.EvictGrace, PoolsEvictGraceDefault)
	p.RestartBackoffMax = cmp.Or(p.RestartBackoffMax, PoolsRestartBackoffMaxDefault)
	p.StartTimeout = cmp.Or(p.StartTimeout, PoolsStartTimeoutDefault)
}

func (c *Config) validatePools() []error {
	var errs []error
	p := c.Pools
	switch p.Provisioner {
	case "", ProvisionerLocal, ProvisionerExternal:
	default:
		errs = append(errs, fmt.Errorf("config: pools.provisioner %q: want %s or %s (or empty for the mode's default)",
			p.Provisioner, ProvisionerLocal, ProvisionerExternal))
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"heartbeat_interval", p.HeartbeatInterval}, {"reconcile_interval", p.ReconcileInterval},
		{"drain_grace", p.DrainGrace}, {"evict_grace", p.EvictGrace},
		{"restart_backoff_max", p.RestartBackoffMax}, {"start_timeout", p.StartTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("config: pools.%s must be positive", d.key))
		}
	}
	if p.OfflineHeartbeats < 2 {
		errs = append(errs, fmt.Errorf("config: pools.offline_heartbeats must be at least 2 (one late heartbeat is not a lost worker)"))
	}
	return errs
}
