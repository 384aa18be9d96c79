// Package workload reads what admission needs from a pod: its workload type,
// whether Run:ai may preempt it, and how many GPUs it asks for. Everything
// here is a pure function of the pod, so the rules are table-tested once and
// shared by the webhooks, the GPU view and the pod cache.
package workload

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Label and annotation keys read from pods.
const (
	TypeLabel             = "hopsworks.ai/workload-type"
	PreemptibilityLabel   = "kai.scheduler/preemptibility"
	KueueQueueLabel       = "kueue.x-k8s.io/queue-name"
	GPUFractionAnnotation = "gpu-fraction"
	GPUFractionDevices    = "gpu-fraction-num-devices"
	GPUMemoryAnnotation   = "gpu-memory"
	GPUResource           = corev1.ResourceName("nvidia.com/gpu")
	NonPreemptibleValue   = "non-preemptible"
)

// Workload types Hopsworks puts on the pods it creates.
const (
	TypeJob        = "job"
	TypeNotebook   = "notebook"
	TypeTerminal   = "terminal"
	TypeApp        = "app"
	TypeDeployment = "deployment"
	TypeRay        = "ray"
)

// Pod is the part of a v1.Pod that admission decisions read. Decoding into it
// instead of a full corev1.Pod skips volumes, env, probes and status, which is
// most of a notebook pod's bytes (see the benchmarks in pkg/mutate).
type Pod struct {
	Metadata PodMeta `json:"metadata"`
	Spec     PodSpec `json:"spec"`
	Status   struct {
		Phase corev1.PodPhase `json:"phase,omitempty"`
	} `json:"status"`
}

// PodMeta is the metadata admission reads.
type PodMeta struct {
	Name              string            `json:"name,omitempty"`
	GenerateName      string            `json:"generateName,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	DeletionTimestamp *json.RawMessage  `json:"deletionTimestamp,omitempty"`
}

// PodSpec is the spec admission reads.
type PodSpec struct {
	SchedulerName  string      `json:"schedulerName,omitempty"`
	Containers     []Container `json:"containers"`
	InitContainers []Container `json:"initContainers,omitempty"`
}

// Container is a container's name, restart policy (sidecars) and resources.
type Container struct {
	Name          string                         `json:"name"`
	RestartPolicy *corev1.ContainerRestartPolicy `json:"restartPolicy,omitempty"`
	Resources     corev1.ResourceRequirements    `json:"resources,omitempty"`
}

// FromCore converts a typed pod (from a cache or a client) to the admission view.
func FromCore(p *corev1.Pod) *Pod {
	out := &Pod{Metadata: PodMeta{
		Name: p.Name, GenerateName: p.GenerateName, Namespace: p.Namespace, UID: string(p.UID),
		Labels: p.Labels, Annotations: p.Annotations,
	}}
	if p.DeletionTimestamp != nil {
		raw := json.RawMessage(`"` + p.DeletionTimestamp.UTC().Format("2006-01-02T15:04:05Z") + `"`)
		out.Metadata.DeletionTimestamp = &raw
	}
	out.Spec.SchedulerName = p.Spec.SchedulerName
	conv := func(cs []corev1.Container) []Container {
		res := make([]Container, len(cs))
		for i, c := range cs {
			res[i] = Container{Name: c.Name, RestartPolicy: c.RestartPolicy, Resources: c.Resources}
		}
		return res
	}
	out.Spec.Containers = conv(p.Spec.Containers)
	out.Spec.InitContainers = conv(p.Spec.InitContainers)
	out.Status.Phase = p.Status.Phase
	return out
}

// DisplayName is the pod's name, or its generateName prefix with "*" when the
// API server has not named it yet (controller-created pods at admission).
func (p *Pod) DisplayName() string {
	if p.Metadata.Name != "" {
		return p.Metadata.Name
	}
	if p.Metadata.GenerateName != "" {
		return p.Metadata.GenerateName + "*"
	}
	return "(unnamed pod)"
}

// Type returns the Hopsworks workload type label, lower-cased and trimmed.
func (p *Pod) Type() string {
	return strings.ToLower(strings.TrimSpace(p.Metadata.Labels[TypeLabel]))
}

// NonPreemptible reports whether Run:ai will not preempt the pod, so it must
// fit in the project's deserved quota. Notebooks, terminals, apps and
// deployments are non-preemptible whatever other label they carry: a
// "preemptible" label on a notebook cannot take it out of the quota check.
// Any pod can opt in with kai.scheduler/preemptibility=non-preemptible.
func (p *Pod) NonPreemptible() bool {
	switch p.Type() {
	case TypeNotebook, TypeTerminal, TypeApp, TypeDeployment:
		return true
	}
	return strings.TrimSpace(p.Metadata.Labels[PreemptibilityLabel]) == NonPreemptibleValue
}

// Terminated reports whether the pod no longer holds GPUs.
func (p *Pod) Terminated() bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// GPUs is what a pod asks for: whole devices and a fractional share.
type GPUs struct {
	Whole    int64   // nvidia.com/gpu, as Kubernetes counts the pod's effective request
	Fraction float64 // gpu-fraction × gpu-fraction-num-devices
	// MIG counts MIG slices (nvidia.com/mig-<profile>) over all containers.
	// A MIG slice is a GPU for the scheduler rule (it must not escape
	// runai-scheduler), but it is not counted against deserved GPUs here:
	// its share of a GPU depends on the profile, and Run:ai accounts it.
	MIG int64
}

// Total is the pod's GPU demand in GPUs, as Run:ai accounts it.
func (g GPUs) Total() float64 { return float64(g.Whole) + g.Fraction }

// Any reports whether the pod asks for GPUs at all.
func (g GPUs) Any() bool { return g.Whole > 0 || g.Fraction > 0 || g.MIG > 0 }

// MIGResourcePrefix starts the extended resources of NVIDIA MIG slices.
const MIGResourcePrefix = "nvidia.com/mig-"

// migSlices sums a container's MIG slices (limits, else requests).
func migSlices(c Container) int64 {
	var n int64
	for _, rl := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		var m int64
		for name, q := range rl {
			if strings.HasPrefix(string(name), MIGResourcePrefix) {
				if v, ok := q.AsInt64(); ok && v > 0 {
					m = addSat(m, v)
				} else if q.Sign() > 0 {
					m = addSat(m, 1)
				}
			}
		}
		n = max(n, m)
	}
	return n
}

// GPURequest returns the pod's GPU demand. Whole GPUs follow Kubernetes'
// effective-request rule: the larger of the app containers plus restartable
// (sidecar) init containers, and the largest init-container step. A GPU
// resource may be given as a limit, a request, or both (Kubernetes requires
// them equal); the larger is taken. Fractions come from Run:ai's
// annotations. Malformed values are errors, never silently zero, because a
// zero would let the pod past the quota check.
func (p *Pod) GPURequest() (GPUs, error) {
	var g GPUs
	per := func(c Container) (int64, error) {
		n := int64(0)
		for _, rl := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
			q, ok := rl[GPUResource]
			if !ok {
				continue
			}
			v, ok := q.AsInt64()
			if !ok || v < 0 || q.Cmp(*resource.NewQuantity(v, resource.DecimalSI)) != 0 {
				return 0, fmt.Errorf("container %q asks for %s %s; it must be a whole number of GPUs (use the gpu-fraction annotation for a share)", c.Name, q.String(), GPUResource)
			}
			if v > n {
				n = v
			}
		}
		return n, nil
	}
	var app int64
	for _, c := range p.Spec.Containers {
		v, err := per(c)
		if err != nil {
			return g, err
		}
		app = addSat(app, v)
	}
	var sidecars, initMax int64
	for _, c := range p.Spec.InitContainers {
		v, err := per(c)
		if err != nil {
			return g, err
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			app = addSat(app, v)
			sidecars = addSat(sidecars, v)
			initMax = max(initMax, sidecars)
			continue
		}
		initMax = max(initMax, addSat(v, sidecars))
	}
	g.Whole = max(app, initMax)
	for _, c := range p.Spec.Containers {
		g.MIG = addSat(g.MIG, migSlices(c))
	}
	for _, c := range p.Spec.InitContainers {
		g.MIG = addSat(g.MIG, migSlices(c))
	}

	frac, hasFrac := p.Metadata.Annotations[GPUFractionAnnotation]
	if !hasFrac {
		if _, ok := p.Metadata.Annotations[GPUFractionDevices]; ok {
			return g, fmt.Errorf("annotation %s is set without %s", GPUFractionDevices, GPUFractionAnnotation)
		}
		return g, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(frac), 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f > 1 {
		return g, fmt.Errorf("annotation %s=%q must be a number greater than 0 and at most 1", GPUFractionAnnotation, frac)
	}
	devices := int64(1)
	if s, ok := p.Metadata.Annotations[GPUFractionDevices]; ok {
		devices, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || devices < 1 || devices > 1024 {
			return g, fmt.Errorf("annotation %s=%q must be a whole number of devices from 1 to 1024", GPUFractionDevices, s)
		}
	}
	if g.Whole > 0 {
		return g, fmt.Errorf("the pod asks for %d %s and a %s share; ask for one or the other", g.Whole, GPUResource, GPUFractionAnnotation)
	}
	g.Fraction = f * float64(devices)
	return g, nil
}

// addSat adds two non-negative GPU counts, saturating at MaxInt64: a sum
// that wrapped around would turn an absurd request into "no GPUs" and let
// the pod past the scheduler and quota rules.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
