package deploy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// poolExample is what `orchctl pools manifest mistral` prints for the pool of docs/runbook.md
// ("Add a GPU pool"); cmd/orchctl's TestPoolsManifest prints it again and compares.
const poolExample = "k8s/examples/pool-mistral.yaml"

// kustomize renders the kustomization in dir offline, as `kubectl kustomize` does; the test is
// skipped where kubectl is not installed.
func kustomize(t *testing.T, dir string) []map[string]any {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not installed: the kustomizations are not rendered")
	}
	out, err := exec.Command("kubectl", "kustomize", dir).CombinedOutput()
	require.NoError(t, err, "kubectl kustomize %s: %s", dir, out)
	return decodeDocs(t, out, dir)
}

// objectIDs returns kind/namespace/name of every object.
func objectIDs(t *testing.T, ds []map[string]any) []string {
	t.Helper()
	var out []string
	for _, d := range ds {
		ns, _ := get(t, d, "metadata", "namespace").(string)
		out = append(out, fmt.Sprintf("%s/%s/%s", d["kind"], ns, str(t, d, "metadata", "name")))
	}
	return out
}

// podSpecOf returns the pod template of a workload, nil for any other kind.
func podSpecOf(t *testing.T, d map[string]any) map[string]any {
	t.Helper()
	switch d["kind"] {
	case "Deployment", "StatefulSet", "DaemonSet", "Job":
		tpl, ok := get(t, d, "spec", "template").(map[string]any)
		require.True(t, ok, "%s %s has a pod template", d["kind"], get(t, d, "metadata", "name"))
		return tpl
	}
	return nil
}

// containersOf returns the containers (and init containers) of a workload's pod template.
func containersOf(t *testing.T, d map[string]any) []map[string]any {
	t.Helper()
	tpl := podSpecOf(t, d)
	if tpl == nil {
		return nil
	}
	var out []map[string]any
	for _, key := range []string{"initContainers", "containers"} {
		l, _ := get(t, tpl, "spec", key).([]any)
		for _, c := range l {
			out = append(out, c.(map[string]any))
		}
	}
	return out
}

// TestKustomize renders the base, every overlay and keda/ with kubectl kustomize: the base holds
// every manifest of deploy/k8s/base but the example Secret, in the namespace, and names the
// repository `make image` commits to; every overlay renders the same objects with the image
// `make image` commits (make image-name); KEDA's objects target Deployments of the base; and a
// pool's objects from `orchctl pools manifest`, added to the release overlay, render with that
// image too.
func TestKustomize(t *testing.T) {
	t.Parallel()
	base := kustomize(t, "k8s/base")
	var files []map[string]any
	paths, err := filepath.Glob("k8s/base/*.yaml")
	require.NoError(t, err)
	for _, p := range paths {
		if name := filepath.Base(p); name != "kustomization.yaml" && name != "secret.example.yaml" {
			files = append(files, docs(t, p)...)
		}
	}
	require.ElementsMatch(t, objectIDs(t, files), objectIDs(t, base), "the base kustomization lists every manifest of k8s/base")
	for _, d := range base {
		if d["kind"] != "Namespace" {
			require.Equal(t, "gpu-orchestrator", str(t, d, "metadata", "namespace"), "%s", objectIDs(t, []map[string]any{d}))
		}
	}
	image := imageName(t)
	repo := image[:strings.LastIndex(image, ":")]
	for _, d := range base {
		for _, c := range containersOf(t, d) {
			require.True(t, strings.HasPrefix(str(t, c, "image"), repo+":"), "%s names %s", c["name"], repo)
		}
	}

	overlays, err := filepath.Glob("k8s/overlays/*/kustomization.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, overlays)
	for _, k := range overlays {
		dir := filepath.Dir(k)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			ds := kustomize(t, dir)
			require.ElementsMatch(t, objectIDs(t, base), objectIDs(t, ds))
			n := 0
			for _, d := range ds {
				for _, c := range containersOf(t, d) {
					require.Equal(t, image, str(t, c, "image"), "%s runs the image make image commits", c["name"])
					n++
				}
			}
			require.Positive(t, n)
		})
	}

	t.Run("KEDA", func(t *testing.T) {
		t.Parallel()
		deployments := map[string]bool{}
		for _, d := range of(base, "Deployment") {
			deployments[str(t, d, "metadata", "name")] = true
		}
		ds := kustomize(t, "../keda")
		require.Len(t, of(ds, "TriggerAuthentication"), 1)
		sos := of(ds, "ScaledObject")
		require.Len(t, sos, len(of(docs(t, "../keda/scaledobjects.yaml"), "ScaledObject")))
		for _, so := range sos {
			require.True(t, deployments[str(t, so, "spec", "scaleTargetRef", "name")], "%s targets a Deployment of the base", str(t, so, "metadata", "name"))
		}
	})

	t.Run("PoolInTheReleaseOverlay", func(t *testing.T) {
		t.Parallel()
		ds := kustomize(t, overlayWith(t, "k8s/overlays/release", poolExample))
		pool := docs(t, poolExample)
		require.Subset(t, objectIDs(t, ds), objectIDs(t, pool))
		for _, d := range ds {
			if d["kind"] == "Deployment" && strings.HasPrefix(str(t, d, "metadata", "name"), "gpu-orchestrator-pool-") {
				require.Equal(t, image, str(t, d, "spec", "template", "spec", "containers", 0, "image"))
			}
		}
	})
}

// overlayWith returns a copy of the overlay in dir, in a temporary directory, with extra files
// added to its resources: what an operator does with a pool's manifest.
func overlayWith(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	tmp := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &k))
	absDir, err := filepath.Abs(dir)
	require.NoError(t, err)
	var resources []any
	for _, r := range list(t, k, "resources") {
		rel, err := filepath.Rel(tmp, filepath.Join(absDir, r.(string)))
		require.NoError(t, err)
		resources = append(resources, rel)
	}
	for _, f := range extra {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(tmp, filepath.Base(f)), b, 0o600))
		resources = append(resources, filepath.Base(f))
	}
	k["resources"] = resources
	out, err := yaml.Marshal(k)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), out, 0o600))
	return tmp
}

// listenSettings are the settings that make a process listen, by the environment variable that
// sets them, with the flag that overrides the same setting.
var listenSettings = map[string]string{
	"ORCH_HTTP_ADDR":           "",
	"ORCH_WORKER_METRICS_ADDR": "--metrics-addr",
}

// TestManifestsMatchConfiguration: every environment variable the manifests set (the base's and
// a pool's from `orchctl pools manifest`) is one docs/configuration.md describes and the code
// reads, and every port a container declares is one its process listens on, on every address,
// by a setting whose documented default has that port; probes, Services and the Prometheus
// annotations name declared ports.
func TestManifestsMatchConfiguration(t *testing.T) {
	t.Parallel()
	confRaw, err := os.ReadFile("../docs/configuration.md")
	require.NoError(t, err)
	conf := string(confRaw)
	envRE := regexp.MustCompile(`\b(?:ORCH|OTEL)_[A-Z0-9_]+\b`)
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:ORCH|OTEL)_[A-Z0-9_]+)`").FindAllStringSubmatch(conf, -1) {
		documented[m[1]] = true
	}
	read := readByTheCode(t, envRE)

	var ds []map[string]any
	paths, err := filepath.Glob("k8s/base/*.yaml")
	require.NoError(t, err)
	for _, p := range append(paths, poolExample) {
		if filepath.Base(p) != "kustomization.yaml" {
			ds = append(ds, docs(t, p)...)
		}
	}
	declared := map[string][]map[string]any{} // the ports of each workload's containers
	for _, d := range ds {
		for _, c := range containersOf(t, d) {
			where := fmt.Sprintf("%s %s, container %s", d["kind"], str(t, d, "metadata", "name"), c["name"])
			listens := map[int]string{}
			env, _ := c["env"].([]any)
			for _, e := range env {
				name := str(t, e, "name")
				require.True(t, documented[name], "%s sets %s, which docs/configuration.md does not describe", where, name)
				require.True(t, read[name], "%s sets %s, which no code reads", where, name)
				if _, ok := listenSettings[name]; ok {
					value, _ := get(t, e, "value").(string)
					listens[listenPort(t, where, name, value)] = name
				}
			}
			args, _ := c["args"].([]any)
			for i, a := range args {
				for name, flag := range listenSettings {
					if flag != "" && a == flag {
						require.Greater(t, len(args), i+1, "%s: %s has a value", where, flag)
						listens[listenPort(t, where, flag, args[i+1].(string))] = name
					}
				}
			}
			ports, _ := c["ports"].([]any)
			var have []int
			for _, p := range ports {
				port, ok := get(t, p, "containerPort").(int)
				require.True(t, ok, "%s: containerPort is a number", where)
				have = append(have, port)
				name, ok := listens[port]
				require.True(t, ok, "%s declares port %d, on which its process does not listen (%v)", where, port, listens)
				row := configRow(t, conf, name)
				require.Contains(t, row, ":"+strconv.Itoa(port), "%s: the documented default of %s has port %d", where, name, port)
				if flag := listenSettings[name]; flag != "" && slices.Contains(args, any(flag)) {
					require.Contains(t, row, "`"+flag+"`", "%s: docs/configuration.md names %s", where, flag)
				}
			}
			for port := range listens {
				require.Contains(t, have, port, "%s listens on %d without declaring it", where, port)
			}
			declared[str(t, d, "metadata", "name")] = append(declared[str(t, d, "metadata", "name")], c)
			requireProbesNamePorts(t, where, c)
		}
		if tpl := podSpecOf(t, d); tpl != nil {
			if p, ok := get(t, tpl, "metadata", "annotations").(map[string]any)["prometheus.io/port"]; ok {
				requireNamesPort(t, "prometheus.io/port of "+str(t, d, "metadata", "name"), containersOf(t, d), p)
			}
		}
	}
	for _, svc := range of(ds, "Service") {
		var selected []map[string]any
		for _, d := range ds {
			if tpl := podSpecOf(t, d); tpl != nil && selects(t, get(t, svc, "spec", "selector"), get(t, tpl, "metadata", "labels")) {
				selected = append(selected, containersOf(t, d)...)
			}
		}
		require.NotEmpty(t, selected, "Service %s selects pods", str(t, svc, "metadata", "name"))
		for _, p := range list(t, svc, "spec", "ports") {
			requireNamesPort(t, "Service "+str(t, svc, "metadata", "name"), selected, get(t, p, "targetPort"))
		}
	}
}

// listenPort returns the port of a listen address a manifest sets; it must listen on every
// address, or the pod's port is unreachable.
func listenPort(t *testing.T, where, setting, addr string) int {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, "%s: %s=%q is host:port", where, setting, addr)
	require.Contains(t, []string{"", "0.0.0.0", "::"}, host, "%s: %s listens on every address", where, setting)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	return n
}

// configRow returns the line of docs/configuration.md that describes an environment variable.
func configRow(t *testing.T, conf, env string) string {
	t.Helper()
	for _, line := range strings.Split(conf, "\n") {
		if strings.HasPrefix(line, "|") && strings.Contains(line, "`"+env+"`") {
			return line
		}
	}
	require.FailNow(t, "docs/configuration.md has no row for "+env)
	return ""
}

// requireProbesNamePorts checks that a container's probes name ports it declares.
func requireProbesNamePorts(t *testing.T, where string, c map[string]any) {
	t.Helper()
	for _, probe := range []string{"readinessProbe", "livenessProbe", "startupProbe"} {
		if p, ok := get(t, c, probe).(map[string]any); ok {
			if hg, ok := p["httpGet"].(map[string]any); ok {
				requireNamesPort(t, where+" "+probe, []map[string]any{c}, hg["port"])
			}
		}
	}
}

// requireNamesPort checks that port (a name, or a number as an int or a string) is a port one of
// the containers declares.
func requireNamesPort(t *testing.T, where string, containers []map[string]any, port any) {
	t.Helper()
	want := fmt.Sprint(port)
	var have []string
	for _, c := range containers {
		ports, _ := c["ports"].([]any)
		for _, p := range ports {
			name, _ := get(t, p, "name").(string)
			have = append(have, name, fmt.Sprint(get(t, p, "containerPort")))
		}
	}
	require.Contains(t, have, want, "%s names port %v, which no container declares", where, port)
}

// selects reports whether a Service's selector matches a pod's labels.
func selects(t *testing.T, selector, labels any) bool {
	t.Helper()
	sel, _ := selector.(map[string]any)
	lab, _ := labels.(map[string]any)
	for k, v := range sel {
		if lab[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// readByTheCode returns the environment variables the module's code names: the ORCH_* and
// OTEL_* string literals of its non-test Go files.
func readByTheCode(t *testing.T, envRE *regexp.Regexp) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range regexp.MustCompile(`"(`+envRE.String()+`)"`).FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestPoolManifestExample: the ScaledObject `orchctl pools manifest` prints scales the pool's
// Deployment on a series the orchestrator exports, from zero, and keeps the replicas when the
// series is missing.
func TestPoolManifestExample(t *testing.T) {
	t.Parallel()
	ds := docs(t, poolExample)
	deps, sos := of(ds, "Deployment"), of(ds, "ScaledObject")
	require.Len(t, deps, 1)
	require.Len(t, sos, 1)
	so := sos[0]
	require.Equal(t, str(t, deps[0], "metadata", "name"), str(t, so, "spec", "scaleTargetRef", "name"))
	require.EqualValues(t, 0, get(t, so, "spec", "minReplicaCount"))
	tr := get(t, so, "spec", "triggers", 0)
	require.Equal(t, "prometheus", str(t, tr, "type"))
	require.Equal(t, "1", str(t, tr, "metadata", "threshold"), "one replica per target worker")
	require.Equal(t, "false", str(t, tr, "metadata", "ignoreNullValues"))
	query := str(t, tr, "metadata", "query")
	require.Equal(t, []string{"gpu_orchestrator_worker_pool_target_workers"}, requireExported(t, exported(t), "the pool's ScaledObject", query))
	require.Contains(t, query, `pool_id="`+str(t, deps[0], "metadata", "annotations", "gpu-orchestrator/pool-id")+`"`)
}
