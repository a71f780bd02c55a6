package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpuorch/orchestrator/client"
)

// The defaults of `pools manifest`: those of deploy/k8s/base and keda/.
const (
	manifestNamespaceDefault  = "gpu-orchestrator"
	manifestImageDefault      = "ghcr.io/gpuorch/orchestrator:latest"
	manifestPrometheusDefault = "http://prometheus.monitoring.svc:9090"
	manifestMaxWorkersDefault = 100
)

// metadataNodeSelector is the key of a pool's metadata that holds its node selector.
const metadataNodeSelector = "node_selector"

func newPoolsManifestCmd(g *globals) *cobra.Command {
	o := manifestOptions{}
	cmd := &cobra.Command{
		Use:   "manifest POOL_ID [flags]",
		Short: "Print the Kubernetes Deployment and KEDA ScaledObject of a pool",
		Long: `Print the Kubernetes objects that run a pool's workers (GET /workers/pools/{id}): a Deployment of
the worker binary serving the pool's types as a member of the pool (ORCH_POOL_ID, the pool's
model in ORCH_MODEL_ID), and a KEDA ScaledObject that keeps it at the pool's target workers.

The target is gpu_orchestrator_worker_pool_target_workers{pool_id}, which every orchestrator
exports: the pool's desired_workers while it is starting or running, 0 once it drains, stops or
is evicted. So "orchctl pools scale POOL N" reaches the Deployment through Prometheus and KEDA
within a scrape and a polling interval, a drain or an eviction scales it to zero, and a restart
brings it back; minReplicaCount is 0 whatever the state, for the trigger to take it there. A
missing series is an error to KEDA (ignoreNullValues false), which then keeps the replicas. The
Deployment's replicas are the target now, for a cluster without KEDA.

The pool's node selector is its metadata's "node_selector" object (pools create --metadata
'{"node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}'), with --node-selector
added on top. --gpus is the nvidia.com/gpu limit of each worker (0 for a CPU pool). The image is
the base's; add the output to your overlay of deploy/k8s (its images: entry names the tag), or
set --image. Print it again after a change of the pool's types or model: the model is in the pod
template, so applying it rolls the workers onto the new model.

The names are gpu-orchestrator-pool-<pool_id>, made a valid Kubernetes name (lower case, at most
63 characters, a hash added when the id had to change). With -o json the one document is a v1
List of the two objects. Exit codes: 0 printed; 1 usage (a flag, or a node selector that is not
a Kubernetes label); 2 API error (404: no such pool).`,
		Example: `  orchctl pools manifest mistral > my-overlay/pool-mistral.yaml
  orchctl pools manifest mistral --node-selector cloud.google.com/gke-accelerator=nvidia-h100-80gb
  orchctl pools manifest embed --gpus 0 | kubectl apply -f -`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeFromAPI(g, 1, poolIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.gpus < 0 || o.maxWorkers < 1 {
				return usageErrorf(cmd, "--gpus must be 0 or more and --max-workers 1 or more")
			}
			if err := validNodeSelector(o.nodeSelector); err != nil {
				return usageErrorf(cmd, "--node-selector: %v", err)
			}
			c, err := g.client(cmd)
			if err != nil {
				return err
			}
			p, err := c.GetPool(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			sel, err := poolNodeSelector(p)
			if err != nil {
				return usageErrorf(cmd, "pool %s: metadata %s: %v (set it with pools create --metadata)", p.PoolID, metadataNodeSelector, err)
			}
			opts := o
			opts.nodeSelector = sel
			maps.Copy(opts.nodeSelector, o.nodeSelector)
			if opts.redisAddr == "" {
				opts.redisAddr = "redis." + opts.namespace + ".svc:6379"
			}
			objs := []k8sObject{poolDeployment(p, opts), poolScaledObject(p, opts)}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"apiVersion": "v1", "kind": "List", "items": objs})
			}
			return writeManifest(cmd.OutOrStdout(), p, objs)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.namespace, "namespace", manifestNamespaceDefault, "the namespace of the objects (deploy/k8s's)")
	fl.StringVar(&o.image, "image", manifestImageDefault, "the workers' image (an overlay's images: entry rewrites it)")
	fl.IntVar(&o.gpus, "gpus", 1, "nvidia.com/gpu per worker (0: a CPU pool)")
	fl.StringToStringVar(&o.nodeSelector, "node-selector", nil, "node labels the workers run on, key=value (on top of the pool's metadata node_selector)")
	fl.StringVar(&o.prometheus, "prometheus", manifestPrometheusDefault, "the Prometheus KEDA queries for the pool's target")
	fl.IntVar(&o.maxWorkers, "max-workers", manifestMaxWorkersDefault, "the most workers KEDA runs, whatever the pool asks")
	fl.StringVar(&o.tokenKey, "token-key", "worker-token", "the key of the gpu-orchestrator Secret with the workers' token (one scoped to the pool: pool=<id>)")
	fl.StringVar(&o.redisAddr, "redis-addr", "", "the Redis the workers read (default redis.<namespace>.svc:6379)")
	return cmd
}

// poolNodeSelector returns the node selector in a pool's metadata (an empty map without one).
func poolNodeSelector(p client.Pool) (map[string]string, error) {
	out := map[string]string{}
	if len(p.Metadata) == 0 {
		return out, nil
	}
	var md map[string]json.RawMessage
	if err := json.Unmarshal(p.Metadata, &md); err != nil || md[metadataNodeSelector] == nil {
		return out, nil //nolint:nilerr // metadata that is not an object holds no node selector
	}
	if err := json.Unmarshal(md[metadataNodeSelector], &out); err != nil {
		return nil, fmt.Errorf("want an object of strings: %w", err)
	}
	return out, validNodeSelector(out)
}

var (
	// labelName is the name of a Kubernetes label key, and a label value when not empty.
	labelName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	// labelPrefix is a label key's prefix, a DNS subdomain.
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// validNodeSelector checks that every key and value is a Kubernetes label's.
func validNodeSelector(sel map[string]string) error {
	for k, v := range sel {
		prefix, name, hasPrefix := strings.Cut(k, "/")
		if !hasPrefix {
			prefix, name = "", k
		}
		if !labelName.MatchString(name) || (hasPrefix && (len(prefix) > 253 || !labelPrefix.MatchString(prefix))) {
			return fmt.Errorf("%q is not a Kubernetes label key", k)
		}
		if v != "" && !labelName.MatchString(v) {
			return fmt.Errorf("%q (of %s) is not a Kubernetes label value", v, k)
		}
	}
	return nil
}

// writeManifest writes the objects as YAML documents, after a comment that says where they
// came from.
func writeManifest(w io.Writer, p client.Pool, objs []k8sObject) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Pool %s (agent %s, model %s, types %s): its workers' Deployment and the KEDA\n",
		p.PoolID, p.AgentName, p.ModelID, strings.Join(p.Types, ","))
	fmt.Fprintf(&b, "# ScaledObject that keeps it at the pool's target workers. From `orchctl pools manifest %s`;\n", p.PoolID)
	b.WriteString("# print it again after a change of the pool's types or model.\n")
	for _, o := range objs {
		raw, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode %s: %w", o.Kind, err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return fmt.Errorf("encode %s: %w", o.Kind, err)
		}
		blockStyle(&doc)
		b.WriteString("---\n")
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(&doc); err != nil {
			return fmt.Errorf("encode %s: %w", o.Kind, err)
		}
		if err := enc.Close(); err != nil {
			return fmt.Errorf("encode %s: %w", o.Kind, err)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// blockStyle turns a document decoded from JSON (flow style, every string quoted) into the
// YAML kubectl prints: block style, strings quoted only where they must be.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}
