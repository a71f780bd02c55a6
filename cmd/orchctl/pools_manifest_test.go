package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// updateExample rewrites the example manifest from what the command prints:
// go test ./cmd/orchctl -run TestPoolsManifest -update-example
var updateExample = flag.Bool("update-example", false, "rewrite "+poolManifestExample)

// poolManifestExample is the manifest of the runbook's pool (docs/runbook.md, "Add a GPU pool"),
// which go test ./deploy/ renders in the release overlay and checks against the configuration.
const poolManifestExample = "../../deploy/k8s/examples/pool-mistral.yaml"

// yamlDocs decodes the YAML documents of s.
func yamlDocs(t *testing.T, s string) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(s))
	var out []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, s)
		out = append(out, d)
	}
}

// dig walks decoded YAML by map keys and list indexes.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.True(t, ok, "not a map at %q", k)
			v = m[k]
		case int:
			l, ok := v.([]any)
			require.True(t, ok && k < len(l), "not a list of %d", k+1)
			v = l[k]
		}
	}
	return v
}

func TestPoolsManifest(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.runOK(t, "pools", "create", "mistral", "--agent", "chat", "--model", "mistral-7b", "--types", "inference",
		"--workers", "2", "--metadata", `{"node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}`)

	t.Run("TheRunbooksExample", func(t *testing.T) {
		t.Parallel()
		r := b.runOK(t, "pools", "manifest", "mistral")
		if *updateExample {
			require.NoError(t, os.WriteFile(poolManifestExample, []byte(r.stdout), 0o644)) //nolint:gosec // a file of the repository
		}
		want, err := os.ReadFile(poolManifestExample)
		require.NoError(t, err)
		require.Equal(t, string(want), r.stdout, "the example is what the command prints (-update-example rewrites it)")

		ds := yamlDocs(t, r.stdout)
		require.Len(t, ds, 2)
		dep, so := ds[0], ds[1]
		require.Equal(t, "Deployment", dep["kind"])
		require.Equal(t, 2, dig(t, dep, "spec", "replicas"), "a running pool's desired workers")
		c := dig(t, dep, "spec", "template", "spec", "containers", 0)
		require.Equal(t, []any{"--types", "inference", "--metrics-addr", "0.0.0.0:9091"}, dig(t, c, "args"))
		env := map[string]any{}
		for _, e := range dig(t, c, "env").([]any) {
			env[dig(t, e, "name").(string)] = e.(map[string]any)["value"]
		}
		require.Equal(t, "mistral", env["ORCH_POOL_ID"])
		require.Equal(t, "mistral-7b", env["ORCH_MODEL_ID"])
		require.Equal(t, "1", dig(t, c, "resources", "limits", "nvidia.com/gpu"))
		require.Equal(t, map[string]any{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
			dig(t, dep, "spec", "template", "spec", "nodeSelector"), "the pool's metadata node_selector")

		require.Equal(t, "ScaledObject", so["kind"])
		require.Equal(t, dig(t, dep, "metadata", "name"), dig(t, so, "spec", "scaleTargetRef", "name"))
		require.Equal(t, 0, dig(t, so, "spec", "minReplicaCount"))
		tr := dig(t, so, "spec", "triggers", 0)
		require.Equal(t, "prometheus", dig(t, tr, "type"))
		require.Equal(t, `max(gpu_orchestrator_worker_pool_target_workers{pool_id="mistral"})`, dig(t, tr, "metadata", "query"))
		require.Equal(t, "false", dig(t, tr, "metadata", "ignoreNullValues"), "no series keeps the replicas")
		requireKustomizeRenders(t, r.stdout)
	})

	t.Run("FollowsThePool", func(t *testing.T) {
		t.Parallel()
		b.createPool(t, "follow", 2)
		list := decodeJSON[struct {
			APIVersion string           `json:"apiVersion"`
			Kind       string           `json:"kind"`
			Items      []map[string]any `json:"items"`
		}](t, b.runOK(t, "pools", "manifest", "follow", "--gpus", "0", "--node-selector", "zone=a", "-o", "json"))
		require.Equal(t, "v1/List", list.APIVersion+"/"+list.Kind)
		require.Len(t, list.Items, 2)
		require.EqualValues(t, 2, dig(t, list.Items[0], "spec", "replicas"))
		require.Nil(t, dig(t, list.Items[0], "spec", "template", "spec", "containers", 0, "resources", "limits").(map[string]any)["nvidia.com/gpu"],
			"--gpus 0: a CPU pool")
		require.Equal(t, map[string]any{"zone": "a"}, dig(t, list.Items[0], "spec", "template", "spec", "nodeSelector"))

		b.runOK(t, "pools", "scale", "follow", "3")
		require.Equal(t, 3, dig(t, yamlDocs(t, b.runOK(t, "pools", "manifest", "follow").stdout)[0], "spec", "replicas"))
		b.runOK(t, "pools", "drain", "follow", "--wait", "--poll", "20ms")
		ds := yamlDocs(t, b.runOK(t, "pools", "manifest", "follow").stdout)
		require.Equal(t, 0, dig(t, ds[0], "spec", "replicas"), "a stopped pool runs no worker")
		require.Equal(t, 0, dig(t, ds[1], "spec", "minReplicaCount"))
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, "pools", "manifest", "nope")
		require.Equal(t, exitAPI, r.code, "%s", r)
		r = b.run(t, "pools", "manifest", "mistral", "--node-selector", "bad key=x")
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, `"bad key" is not a Kubernetes label key`)
		b.runOK(t, "pools", "create", "badsel", "--agent", "chat", "--model", "m", "--types", "noop",
			"--metadata", `{"node_selector": {"zone": "not ok"}}`)
		r = b.run(t, "pools", "manifest", "badsel")
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "pool badsel: metadata node_selector")
	})

	t.Run("IdsThatAreNotKubernetesNames", func(t *testing.T) {
		t.Parallel()
		long := strings.Repeat("x", 100)
		names := map[string]bool{}
		for _, id := range []string{"Team:Mistral_7B", "team-mistral-7b", "team:mistral_7b", long} {
			b.createPool(t, id, 1)
			ds := yamlDocs(t, b.runOK(t, "pools", "manifest", id).stdout)
			name := dig(t, ds[0], "metadata", "name").(string)
			require.Regexp(t, `^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`, name, id)
			require.False(t, names[name], "%s: two pools, two names", id)
			names[name] = true
			require.Equal(t, name, dig(t, ds[1], "spec", "scaleTargetRef", "name"))
			require.Contains(t, dig(t, ds[1], "spec", "triggers", 0, "metadata", "query"), `pool_id="`+id+`"`)
		}
		require.True(t, names["gpu-orchestrator-pool-team-mistral-7b"], "a valid name is kept as it is")
	})
}

// requireKustomizeRenders puts manifest in a kustomization with an images: entry, as an
// overlay does, and renders it with kubectl kustomize (skipped without kubectl).
func requireKustomizeRenders(t *testing.T, manifest string) {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Log("kubectl is not installed: the manifest is not rendered")
		return
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pool.yaml"), []byte(manifest), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(`resources: [pool.yaml]
images:
  - name: ghcr.io/gpuorch/orchestrator
    newTag: "9.9.9"
`), 0o600))
	var out, errOut bytes.Buffer
	cmd := exec.Command("kubectl", "kustomize", dir)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), errOut.String())
	ds := yamlDocs(t, out.String())
	require.Len(t, ds, 2)
	require.Equal(t, "ghcr.io/gpuorch/orchestrator:9.9.9", dig(t, ds[0], "spec", "template", "spec", "containers", 0, "image"))
}
