package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/gpuorch/orchestrator/client"
)

// The Kubernetes objects of a pool, as `orchctl pools manifest` prints them: only the fields it
// sets, in the order kubectl prints them. JSON tags name them; the YAML output is the same
// document (json → YAML keeps the order).

type objectMeta struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type k8sObject struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       any        `json:"spec,omitempty"`
}

type deploymentSpec struct {
	Replicas int `json:"replicas"`
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Template struct {
		Metadata objectMeta `json:"metadata"`
		Spec     podSpec    `json:"spec"`
	} `json:"template"`
}

type podSpec struct {
	TerminationGracePeriodSeconds int               `json:"terminationGracePeriodSeconds"`
	NodeSelector                  map[string]string `json:"nodeSelector,omitempty"`
	Tolerations                   []toleration      `json:"tolerations,omitempty"`
	Containers                    []container       `json:"containers"`
	Volumes                       []volume          `json:"volumes"`
}

type toleration struct {
	Key      string `json:"key"`
	Operator string `json:"operator"`
	Effect   string `json:"effect"`
}

type container struct {
	Name         string        `json:"name"`
	Image        string        `json:"image"`
	Command      []string      `json:"command"`
	Args         []string      `json:"args"`
	Ports        []port        `json:"ports"`
	Env          []envVar      `json:"env"`
	Resources    resources     `json:"resources"`
	VolumeMounts []volumeMount `json:"volumeMounts"`
}

type port struct {
	Name          string `json:"name"`
	ContainerPort int    `json:"containerPort"`
}

type envVar struct {
	Name      string        `json:"name"`
	Value     string        `json:"value,omitempty"`
	ValueFrom *envVarSource `json:"valueFrom,omitempty"`
}

type envVarSource struct {
	SecretKeyRef *struct {
		Name string `json:"name"`
		Key  string `json:"key"`
	} `json:"secretKeyRef,omitempty"`
	FieldRef *struct {
		FieldPath string `json:"fieldPath"`
	} `json:"fieldRef,omitempty"`
}

type resources struct {
	Requests map[string]string `json:"requests"`
	Limits   map[string]string `json:"limits"`
}

type volumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly"`
}

type volume struct {
	Name      string `json:"name"`
	ConfigMap struct {
		Name string `json:"name"`
	} `json:"configMap"`
}

type scaledObjectSpec struct {
	ScaleTargetRef struct {
		Name string `json:"name"`
	} `json:"scaleTargetRef"`
	MinReplicaCount int `json:"minReplicaCount"`
	MaxReplicaCount int `json:"maxReplicaCount"`
	PollingInterval int `json:"pollingInterval"`
	CooldownPeriod  int `json:"cooldownPeriod"`
	Advanced        struct {
		HorizontalPodAutoscalerConfig struct {
			Behavior struct {
				ScaleDown struct {
					StabilizationWindowSeconds int           `json:"stabilizationWindowSeconds"`
					Policies                   []scalePolicy `json:"policies"`
				} `json:"scaleDown"`
			} `json:"behavior"`
		} `json:"horizontalPodAutoscalerConfig"`
	} `json:"advanced"`
	Triggers []trigger `json:"triggers"`
}

type scalePolicy struct {
	Type          string `json:"type"`
	Value         int    `json:"value"`
	PeriodSeconds int    `json:"periodSeconds"`
}

type trigger struct {
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata"`
}

// The names the pool's objects share with deploy/k8s/base: the Secret, the ConfigMap, the
// labels and the worker's metrics port.
const (
	k8sSecret            = "gpu-orchestrator"
	k8sConfigMap         = "gpu-orchestrator"
	k8sPoolPrefix        = "gpu-orchestrator-pool-"
	k8sPoolLabel         = "gpu-orchestrator/pool"
	k8sWorkerMetricsPort = 9091
	k8sNameMax           = 63 // KEDA puts the ScaledObject's name in a label value
	// poolTargetMetric is the series a pool's ScaledObject scales on (pools/metrics.go).
	poolTargetMetric = "gpu_orchestrator_worker_pool_target_workers"
)

// manifestOptions are the flags of `pools manifest`.
type manifestOptions struct {
	namespace    string
	image        string
	gpus         int
	nodeSelector map[string]string
	prometheus   string
	maxWorkers   int
	tokenKey     string
	redisAddr    string
}

// poolObjectName is the name of a pool's Deployment and ScaledObject: the prefix and the pool
// id when it is a valid Kubernetes name (lower case, digits, '-') of at most 63 characters;
// otherwise what is left of it after that, cut short, and 8 hex digits of its hash, so that two
// pools never share a name.
func poolObjectName(id string) string {
	s := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '-':
			return r
		case 'A' <= r && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, id)
	s = strings.Trim(s, "-")
	if s == id && len(k8sPoolPrefix)+len(s) <= k8sNameMax {
		return k8sPoolPrefix + s
	}
	sum := sha256.Sum256([]byte(id))
	hash := hex.EncodeToString(sum[:4])
	s = strings.TrimRight(s[:min(len(s), k8sNameMax-len(k8sPoolPrefix)-len(hash)-1)], "-")
	if s == "" {
		return k8sPoolPrefix + hash
	}
	return k8sPoolPrefix + s + "-" + hash
}

// poolTarget is the replicas a pool's Deployment runs now: its desired workers while it is
// starting or running, none once it drains, stopped or was evicted (the target metric's rule).
func poolTarget(p client.Pool) int {
	if poolLive(p.Status) {
		return p.DesiredWorkers
	}
	return 0
}

func secretEnv(name, key string) envVar {
	src := &envVarSource{SecretKeyRef: &struct {
		Name string `json:"name"`
		Key  string `json:"key"`
	}{Name: k8sSecret, Key: key}}
	return envVar{Name: name, ValueFrom: src}
}

func fieldEnv(name, path string) envVar {
	src := &envVarSource{FieldRef: &struct {
		FieldPath string `json:"fieldPath"`
	}{FieldPath: path}}
	return envVar{Name: name, ValueFrom: src}
}

// poolDeployment is the Deployment of a pool's workers: the worker binary serving the pool's
// types as a member of the pool, its model in the pod template's environment (so that applying
// the manifest of a new model rolls the workers onto it).
func poolDeployment(p client.Pool, o manifestOptions) k8sObject {
	name := poolObjectName(p.PoolID)
	labels := map[string]string{
		"app.kubernetes.io/name":      "gpu-orchestrator-worker",
		"app.kubernetes.io/component": "worker",
		"app.kubernetes.io/part-of":   "gpu-orchestrator",
		k8sPoolLabel:                  strings.TrimPrefix(name, k8sPoolPrefix),
	}
	annotations := map[string]string{"gpu-orchestrator/pool-id": p.PoolID, "gpu-orchestrator/model": p.ModelID}
	var spec deploymentSpec
	spec.Replicas = poolTarget(p)
	spec.Selector.MatchLabels = map[string]string{"app.kubernetes.io/name": labels["app.kubernetes.io/name"], k8sPoolLabel: labels[k8sPoolLabel]}
	spec.Template.Metadata = objectMeta{Labels: labels, Annotations: map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   fmt.Sprint(k8sWorkerMetricsPort),
		"prometheus.io/path":   "/metrics",
	}}
	limits := map[string]string{"memory": "2Gi"}
	pod := podSpec{
		// Above shutdown_grace (30s): a scale-in lets the jobs in flight finish.
		TerminationGracePeriodSeconds: 60,
		NodeSelector:                  o.nodeSelector,
	}
	if o.gpus > 0 {
		limits["nvidia.com/gpu"] = fmt.Sprint(o.gpus)
		pod.Tolerations = []toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}}
	}
	pod.Containers = []container{{
		Name:    "worker",
		Image:   o.image,
		Command: []string{"worker"},
		Args:    []string{"--types", strings.Join(p.Types, ","), "--metrics-addr", fmt.Sprintf("0.0.0.0:%d", k8sWorkerMetricsPort)},
		Ports:   []port{{Name: "metrics", ContainerPort: k8sWorkerMetricsPort}},
		Env: []envVar{
			{Name: "ORCH_CONFIG", Value: "/etc/gpu-orchestrator/config.yaml"},
			{Name: "ORCH_API_URL", Value: "http://gpu-orchestrator." + o.namespace + ".svc:8080"},
			secretEnv("ORCH_API_TOKEN", o.tokenKey),
			{Name: "ORCH_REDIS_ADDR", Value: o.redisAddr},
			secretEnv("ORCH_REDIS_PASSWORD", "redis-password"),
			fieldEnv("ORCH_NODE_ID", "spec.nodeName"),
			fieldEnv("ORCH_WORKER_ID", "metadata.name"),
			{Name: "ORCH_POOL_ID", Value: p.PoolID},
			{Name: "ORCH_MODEL_ID", Value: p.ModelID},
			{Name: "OTEL_SERVICE_NAME", Value: "gpu-orchestrator-worker"},
		},
		Resources:    resources{Requests: map[string]string{"cpu": "250m", "memory": "256Mi"}, Limits: limits},
		VolumeMounts: []volumeMount{{Name: "config", MountPath: "/etc/gpu-orchestrator", ReadOnly: true}},
	}}
	var v volume
	v.Name, v.ConfigMap.Name = "config", k8sConfigMap
	pod.Volumes = []volume{v}
	spec.Template.Spec = pod
	return k8sObject{APIVersion: "apps/v1", Kind: "Deployment", Spec: spec,
		Metadata: objectMeta{Name: name, Namespace: o.namespace, Labels: labels, Annotations: annotations}}
}

// poolScaledObject is the KEDA ScaledObject that keeps the pool's Deployment at the pool's
// target workers, read from Prometheus: replicas = the target (threshold 1 per replica), 0 when
// the pool is not live. A missing series (the orchestrator not scraped) is an error to KEDA,
// which then keeps the replicas (ignoreNullValues false), never a scale to zero.
func poolScaledObject(p client.Pool, o manifestOptions) k8sObject {
	name := poolObjectName(p.PoolID)
	var spec scaledObjectSpec
	spec.ScaleTargetRef.Name = name
	spec.MinReplicaCount, spec.MaxReplicaCount = 0, o.maxWorkers
	spec.PollingInterval, spec.CooldownPeriod = 15, 30
	// The target is an order, not a load to smooth: follow it down at once.
	sd := &spec.Advanced.HorizontalPodAutoscalerConfig.Behavior.ScaleDown
	sd.StabilizationWindowSeconds = 0
	sd.Policies = []scalePolicy{{Type: "Percent", Value: 100, PeriodSeconds: 15}}
	spec.Triggers = []trigger{{Type: "prometheus", Metadata: map[string]string{
		"serverAddress":       o.prometheus,
		"query":               fmt.Sprintf(`max(%s{pool_id=%q})`, poolTargetMetric, p.PoolID),
		"threshold":           "1",
		"activationThreshold": "0",
		"ignoreNullValues":    "false",
	}}}
	return k8sObject{APIVersion: "keda.sh/v1alpha1", Kind: "ScaledObject", Spec: spec,
		Metadata: objectMeta{Name: name, Namespace: o.namespace, Labels: map[string]string{
			"app.kubernetes.io/part-of": "gpu-orchestrator",
			k8sPoolLabel:                strings.TrimPrefix(name, k8sPoolPrefix),
		}}}
}
