// Package deploy holds the deployment manifests (k8s/, prometheus/) and, in its tests, the checks
// of every observability artefact of the repository against the code: the Grafana dashboard,
// the alerting rules and the KEDA manifests may only name metrics the processes export, and
// the KEDA streams and consumer groups must be those of the configured job types. The
// kustomizations render (kubectl kustomize), name the image `make image` commits, and set only
// environment variables and ports docs/configuration.md describes (kustomize_test.go); the
// image builds and its binaries run from it (image_test.go).
package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/metrics/metricstest"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/worker"
)

// metricRE finds the project's metric names in PromQL.
var metricRE = regexp.MustCompile(`\bgpu_orchestrator_[a-zA-Z0-9_]+`)

// exported returns the names of every family an orchestrator and a worker export, scraped from
// registries wired as the processes wire them.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	b := metricstest.New(t)
	b.Populate(t)
	names := b.Names(t)
	fams, err := worker.NewMetrics([]string{"noop"}).Registry().Gather()
	require.NoError(t, err)
	for _, f := range fams {
		names[f.GetName()] = true
	}
	return names
}

// requireExported checks that every project metric expr names is exported; a histogram's
// series (_bucket, _sum, _count) count as their family.
func requireExported(t *testing.T, names map[string]bool, where, expr string) []string {
	t.Helper()
	found := metricRE.FindAllString(expr, -1)
	for _, m := range found {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if !names[base] && strings.HasSuffix(m, suffix) {
				base = strings.TrimSuffix(m, suffix)
			}
		}
		require.True(t, names[base], "%s: %s names %s, which is not exported", where, expr, m)
	}
	return found
}

// docs decodes every YAML document of a file (empty documents left out).
func docs(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return decodeDocs(t, raw, path)
}

// decodeDocs decodes every YAML document of raw, which came from where (empty documents left
// out).
func decodeDocs(t *testing.T, raw []byte, where string) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var out []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, where)
		if d != nil {
			out = append(out, d)
		}
	}
}

// of returns the documents of kind.
func of(ds []map[string]any, kind string) []map[string]any {
	var out []map[string]any
	for _, d := range ds {
		if d["kind"] == kind {
			out = append(out, d)
		}
	}
	return out
}

// get walks a decoded YAML or JSON value by keys (map keys, or list indexes as ints).
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.True(t, ok, "%v is not a map at %q", v, k)
			v = m[k]
		case int:
			l, ok := v.([]any)
			require.True(t, ok && k < len(l), "%v is not a list of %d", v, k+1)
			v = l[k]
		}
	}
	return v
}

func str(t *testing.T, v any, path ...any) string {
	t.Helper()
	s, ok := get(t, v, path...).(string)
	require.True(t, ok, "%v at %v is not a string", v, path)
	return s
}

func list(t *testing.T, v any, path ...any) []any {
	t.Helper()
	l, ok := get(t, v, path...).([]any)
	require.True(t, ok, "%v at %v is not a list", v, path)
	return l
}

// deployedConfig loads the configuration of deploy/k8s/base/configmap.yaml as the processes do
// (strict keys, validation).
func deployedConfig(t *testing.T) *config.Config {
	t.Helper()
	cms := of(docs(t, "k8s/base/configmap.yaml"), "ConfigMap")
	require.Len(t, cms, 1)
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(str(t, cms[0], "data", "config.yaml")), 0o600))
	cfg, err := config.Load(path, func(string) string { return "" })
	require.NoError(t, err)
	return cfg
}

// workerDeployments returns the worker Deployments by the job type they serve (--types).
func workerDeployments(t *testing.T) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, d := range of(docs(t, "k8s/base/workers.yaml"), "Deployment") {
		args := list(t, d, "spec", "template", "spec", "containers", 0, "args")
		i := slices.Index(args, any("--types"))
		require.GreaterOrEqual(t, i, 0, "a worker Deployment names its type")
		out[args[i+1].(string)] = d
	}
	return out
}

// envNames returns the names of a Deployment's first container's environment variables.
func envNames(t *testing.T, d map[string]any) []string {
	t.Helper()
	var out []string
	for _, e := range list(t, d, "spec", "template", "spec", "containers", 0, "env") {
		out = append(out, str(t, e, "name"))
	}
	return out
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	names := exported(t)
	raw, err := os.ReadFile("../grafana/dashboards/gpu-orchestrator.json")
	require.NoError(t, err)
	var dash map[string]any
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.Equal(t, "gpu-orchestrator", dash["uid"])

	used := map[string]bool{}
	ids := map[float64]bool{}
	var placed []gridPos
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			id := get(t, p, "id").(float64)
			require.False(t, ids[id], "panel id %v is unique", id)
			ids[id] = true
			title := str(t, p, "title")
			placed = append(placed, panelPos(t, p))
			if str(t, p, "type") == "row" {
				walk(list(t, p, "panels"))
				continue
			}
			require.Equal(t, "${datasource}", str(t, p, "datasource", "uid"), title)
			targets := list(t, p, "targets")
			require.NotEmpty(t, targets, title)
			for _, tg := range targets {
				for _, m := range requireExported(t, names, "panel "+title, str(t, tg, "expr")) {
					used[m] = true
				}
			}
		}
	}
	walk(list(t, dash, "panels"))
	for _, v := range list(t, dash, "templating", "list") {
		if str(t, v, "type") == "query" {
			requireExported(t, names, "variable "+str(t, v, "name"), str(t, v, "definition"))
		}
	}
	for _, m := range []string{
		"gpu_orchestrator_job_queue_depth", "gpu_orchestrator_job_pending_entries", "gpu_orchestrator_job_wait_seconds_bucket",
		"gpu_orchestrator_schedule_wait_seconds_bucket",
		"gpu_orchestrator_job_latency_seconds_bucket", "gpu_orchestrator_jobs_total", "gpu_orchestrator_leases_active",
		"gpu_orchestrator_leases_free", "gpu_orchestrator_gpu_mem_used_pct", "gpu_orchestrator_gpu_utilization_pct",
		"gpu_orchestrator_admission_decisions_total", "gpu_orchestrator_reclaimed_total", "gpu_orchestrator_dlq_depth",
		"gpu_orchestrator_is_leader", "gpu_orchestrator_leader_term", "gpu_orchestrator_worker_pool_workers",
		"gpu_orchestrator_scheduler_placements_total", "gpu_orchestrator_scheduler_waiting_jobs",
	} {
		require.True(t, used[m], "a panel shows %s", m)
	}
	for i, a := range placed {
		require.True(t, a.x >= 0 && a.w > 0 && a.h > 0 && a.x+a.w <= 24, "panel %q fits the 24 columns: %+v", a.title, a)
		for _, b := range placed[i+1:] {
			overlap := a.x < b.x+b.w && b.x < a.x+a.w && a.y < b.y+b.h && b.y < a.y+a.h
			require.False(t, overlap, "panels %q %+v and %q %+v overlap", a.title, a, b.title, b)
		}
	}
}

// gridPos is where a dashboard panel sits.
type gridPos struct {
	title      string
	x, y, w, h float64
}

func panelPos(t *testing.T, p any) gridPos {
	t.Helper()
	num := func(key string) float64 {
		v, ok := get(t, p, "gridPos", key).(float64)
		require.True(t, ok, "panel %v: gridPos.%s is a number", get(t, p, "id"), key)
		return v
	}
	return gridPos{title: str(t, p, "title"), x: num("x"), y: num("y"), w: num("w"), h: num("h")}
}

func TestGrafanaProvisioning(t *testing.T) {
	t.Parallel()
	ds := docs(t, "../grafana/provisioning/datasources/prometheus.yaml")
	require.Len(t, ds, 1)
	require.Equal(t, "prometheus", str(t, ds[0], "datasources", 0, "type"))
	dp := docs(t, "../grafana/provisioning/dashboards/gpu-orchestrator.yaml")
	require.Len(t, dp, 1)
	require.Equal(t, "file", str(t, dp[0], "providers", 0, "type"))
	require.NotEmpty(t, str(t, dp[0], "providers", 0, "options", "path"))
}

func TestAlerts(t *testing.T) {
	t.Parallel()
	names := exported(t)
	ds := docs(t, "prometheus/alerts.yaml")
	require.Len(t, ds, 1)
	rules := map[string]map[string]any{}
	for _, g := range list(t, ds[0], "groups") {
		for _, r := range list(t, g, "rules") {
			rule := r.(map[string]any)
			name := str(t, rule, "alert")
			require.NotContains(t, rules, name, "alert names are unique")
			rules[name] = rule
			require.NotEmpty(t, requireExported(t, names, "alert "+name, str(t, rule, "expr")), "%s uses the project's metrics", name)
			require.Contains(t, []string{"critical", "warning"}, str(t, rule, "labels", "severity"), name)
			require.NotEmpty(t, str(t, rule, "annotations", "summary"), name)
			require.NotEmpty(t, str(t, rule, "for"), name)
		}
	}
	for name, want := range map[string]struct{ metric, forDur string }{
		"GPUOrchestratorNoLeader":          {"gpu_orchestrator_is_leader", "1m"},
		"GPUOrchestratorDLQGrowing":        {"gpu_orchestrator_dlq_depth", ""},
		"GPUOrchestratorQueueLagHigh":      {"gpu_orchestrator_job_queue_depth", "5m"},
		"GPUOrchestratorGPUMemoryHigh":     {"gpu_orchestrator_gpu_mem_used_pct", "5m"},
		"GPUOrchestratorGPUTelemetryStale": {"gpu_orchestrator_gpu_telemetry_age_seconds", ""},
		"GPUOrchestratorWorkersOffline":    {"gpu_orchestrator_workers", ""},
	} {
		rule, ok := rules[name]
		require.True(t, ok, "alert %s exists", name)
		require.Contains(t, str(t, rule, "expr"), want.metric, name)
		if want.forDur != "" {
			require.Equal(t, want.forDur, str(t, rule, "for"), name)
		}
	}
	require.Contains(t, str(t, rules["GPUOrchestratorGPUMemoryHigh"], "expr"), "> 95")
}

func TestKEDARedisStreams(t *testing.T) {
	t.Parallel()
	deployed := deployedConfig(t)
	defaults := config.DefaultJobTypes()
	workers := workerDeployments(t)
	auths := of(docs(t, "../keda/triggerauthentication.yaml"), "TriggerAuthentication")
	require.Len(t, auths, 1)
	auth := str(t, auths[0], "metadata", "name")
	require.Equal(t, "password", str(t, auths[0], "spec", "secretTargetRef", 0, "parameter"))
	secrets := of(docs(t, "k8s/base/secret.example.yaml"), "Secret")
	require.Len(t, secrets, 1)
	require.Equal(t, str(t, secrets[0], "metadata", "name"), str(t, auths[0], "spec", "secretTargetRef", 0, "name"))
	require.Contains(t, get(t, secrets[0], "stringData"), str(t, auths[0], "spec", "secretTargetRef", 0, "key"))

	sos := of(docs(t, "../keda/scaledobjects.yaml"), "ScaledObject")
	require.Len(t, sos, len(workers), "one ScaledObject per worker Deployment")
	for _, so := range sos {
		target := str(t, so, "spec", "scaleTargetRef", "name")
		var typ string
		for ty, d := range workers {
			if str(t, d, "metadata", "name") == target {
				typ = ty
			}
		}
		require.NotEmpty(t, typ, "ScaledObject %s targets a worker Deployment", target)
		require.EqualValues(t, 0, get(t, so, "spec", "minReplicaCount"), "%s scales to zero", target)
		for _, jt := range []*config.JobType{deployed.JobType(typ), defaults[typ]} {
			require.NotNil(t, jt, "type %s is configured and a default type", typ)
		}
		wantStream := "stream:orchestrator:" + deployed.JobType(typ).Stream
		require.Equal(t, wantStream, "stream:orchestrator:"+defaults[typ].Stream, "the deployed stream of %s is the default", typ)

		if deployed.JobType(typ).GPUMemoryMB > 0 {
			// The scheduler keeps a GPU type's jobs out of its stream until it places them,
			// on a node's stream: the type scales on its backlog as the orchestrator counts it.
			requirePrometheusTrigger(t, exported(t), so, typ)
			continue
		}
		modes := map[string]bool{}
		for _, tr := range list(t, so, "spec", "triggers") {
			require.Equal(t, "redis-streams", str(t, tr, "type"))
			md := get(t, tr, "metadata").(map[string]any)
			require.Equal(t, wantStream, md["stream"], target)
			require.Equal(t, streams.GroupName(typ), md["consumerGroup"], target)
			require.Contains(t, envNames(t, workers[typ]), md["addressFromEnv"], "the scale target has the address variable")
			require.Equal(t, auth, str(t, tr, "authenticationRef", "name"))
			if _, ok := md["lagCount"]; ok {
				modes["lag"] = true
				require.Equal(t, "0", md["activationLagCount"], "the first entry wakes a type scaled to zero")
			}
			if _, ok := md["pendingEntriesCount"]; ok {
				modes["pending"] = true
			}
		}
		require.True(t, modes["lag"] && modes["pending"], "%s scales on lag and keeps jobs in flight", target)
	}
}

func TestKEDAPrometheusAlternative(t *testing.T) {
	t.Parallel()
	names := exported(t)
	workers := workerDeployments(t)
	sos := of(docs(t, "../keda/prometheus/scaledobjects.yaml"), "ScaledObject")
	require.Len(t, sos, len(workers))
	for _, so := range sos {
		target := str(t, so, "spec", "scaleTargetRef", "name")
		var typ string
		for ty, d := range workers {
			if str(t, d, "metadata", "name") == target {
				typ = ty
			}
		}
		require.NotEmpty(t, typ, target)
		requirePrometheusTrigger(t, names, so, typ)
	}
}

// requirePrometheusTrigger checks that so scales on a prometheus query of exported metrics,
// the backlog of typ's stream only.
func requirePrometheusTrigger(t *testing.T, names map[string]bool, so any, typ string) {
	t.Helper()
	target := str(t, so, "spec", "scaleTargetRef", "name")
	tr := get(t, so, "spec", "triggers", 0)
	require.Equal(t, "prometheus", str(t, tr, "type"))
	for _, key := range []string{"serverAddress", "query", "threshold", "activationThreshold"} {
		require.NotEmpty(t, str(t, tr, "metadata", key), "%s: %s", target, key)
	}
	require.Equal(t, "0", str(t, tr, "metadata", "activationThreshold"), "%s: the first job wakes a type scaled to zero", target)
	query := str(t, tr, "metadata", "query")
	require.Contains(t, requireExported(t, names, "ScaledObject "+target, query), "gpu_orchestrator_job_queue_depth")
	for _, m := range regexp.MustCompile(`stream="([a-z0-9_]+)"`).FindAllStringSubmatch(query, -1) {
		require.Equal(t, config.DefaultJobTypes()[typ].Stream, m[1], "%s queries its type's stream", target)
	}
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	ds := docs(t, "k8s/base/orchestrator.yaml")
	deps := of(ds, "Deployment")
	require.Len(t, deps, 1)
	orch := deps[0]
	require.EqualValues(t, 2, get(t, orch, "spec", "replicas"), "two replicas: one leads, one stands by")
	require.Equal(t, "/readyz", str(t, orch, "spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet", "path"))
	require.Equal(t, "/metrics", str(t, orch, "spec", "template", "metadata", "annotations", "prometheus.io/path"))
	env := envNames(t, orch)
	for _, name := range []string{"ORCH_MYSQL_DSN", "ORCH_REDIS_ADDR", "ORCH_HTTP_ADDR", "ORCH_API_TOKENS", "ORCH_METRICS_TOKEN", "ORCH_LOG_LEVEL", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		require.Contains(t, env, name)
	}
	svcs := of(ds, "Service")
	require.Len(t, svcs, 1)
	podLabels := get(t, orch, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range get(t, svcs[0], "spec", "selector").(map[string]any) {
		require.Equal(t, v, podLabels[k], "the Service selects the orchestrator pods")
	}

	deployed := deployedConfig(t)
	workers := workerDeployments(t)
	require.NotEmpty(t, workers)
	for typ, d := range workers {
		require.NotNil(t, deployed.JobType(typ), "worker type %s is configured", typ)
		args := list(t, d, "spec", "template", "spec", "containers", 0, "args")
		require.Contains(t, args, any("--metrics-addr"))
		require.Equal(t, "9091", str(t, d, "spec", "template", "metadata", "annotations", "prometheus.io/port"))
		require.Contains(t, envNames(t, d), "ORCH_API_URL")
	}
}

// TestPrometheusScrapeConfig: every scrape job sends the metrics token, which the Secret
// carries for the orchestrator.
func TestPrometheusScrapeConfig(t *testing.T) {
	t.Parallel()
	cfg := docs(t, "prometheus/prometheus.yml")
	require.Len(t, cfg, 1)
	jobs := list(t, cfg[0], "scrape_configs")
	require.NotEmpty(t, jobs)
	for i := range jobs {
		require.Equal(t, "Bearer", str(t, cfg[0], "scrape_configs", i, "authorization", "type"))
		require.NotEmpty(t, str(t, cfg[0], "scrape_configs", i, "authorization", "credentials_file"))
	}
	secrets := of(docs(t, "k8s/base/secret.example.yaml"), "Secret")
	require.Len(t, secrets, 1)
	require.Contains(t, get(t, secrets[0], "stringData"), "metrics-token")
}
