// Package kube adapts the Kubernetes API to the narrow views the decisions
// read: namespaces (cached, with a live read for a namespace the cache has
// not seen yet) and the non-preemptible GPU pods of a namespace (from a pod
// cache stripped to the few fields the quota needs, so 150,000 pods fit in a
// small heap).
package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/mutate"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/quota"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

// Namespaces reads namespaces from Cache, falling back to Live when the cache
// does not have one yet (a pod created right after its namespace).
type Namespaces struct {
	Cache client.Reader
	Live  client.Reader
}

// Get implements nsview.Getter.
func (n Namespaces) Get(ctx context.Context, name string) (nsview.Namespace, bool, error) {
	var ns corev1.Namespace
	err := n.Cache.Get(ctx, client.ObjectKey{Name: name}, &ns)
	if apierrors.IsNotFound(err) && n.Live != nil {
		err = n.Live.Get(ctx, client.ObjectKey{Name: name}, &ns)
	}
	if apierrors.IsNotFound(err) {
		return nsview.Namespace{}, false, nil
	}
	if err != nil {
		return nsview.Namespace{}, false, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	return nsview.Namespace{Name: ns.Name, Labels: ns.Labels, Terminating: ns.DeletionTimestamp != nil}, true, nil
}

// Pods answers quota.Pods from a pod cache.
type Pods struct {
	Cache client.Reader
}

// HeldNonPreemptible lists the namespace's running and waiting
// non-preemptible GPU pods.
func (p Pods) HeldNonPreemptible(namespace string) []quota.HeldPod {
	var list corev1.PodList
	if err := p.Cache.List(context.Background(), &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []quota.HeldPod
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		v := workload.FromCore(pod)
		if !v.NonPreemptible() {
			continue
		}
		g, err := v.GPURequest()
		if err != nil || !g.Any() {
			continue
		}
		out = append(out, quota.HeldPod{ReservationKey: pod.Annotations[mutate.ReservationAnnotation], GPUs: g.Total()})
	}
	return out
}

// keptLabels and keptAnnotations are the only pod metadata the quota reads.
var keptAnnotations = []string{workload.GPUFractionAnnotation, workload.GPUFractionDevices, mutate.ReservationAnnotation}

// StripPod is the pod cache's transform: it keeps the name, labels that
// classify the workload, the GPU annotations, the containers' GPU resources
// and the phase, and drops the rest (env, volumes, probes, status details,
// managed fields), so the cache costs a few hundred bytes a pod.
func StripPod(queueLabel string) func(any) (any, error) {
	keptLabels := []string{workload.TypeLabel, workload.PreemptibilityLabel, queueLabel}
	return func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
			Labels:            keep(pod.Labels, keptLabels), Annotations: keep(pod.Annotations, keptAnnotations),
		}}
		out.Spec.SchedulerName = pod.Spec.SchedulerName
		out.Spec.Containers = stripContainers(pod.Spec.Containers)
		out.Spec.InitContainers = stripContainers(pod.Spec.InitContainers)
		out.Status.Phase = pod.Status.Phase
		return out, nil
	}
}

func keep(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}

func stripContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
		if q, ok := c.Resources.Limits[workload.GPUResource]; ok {
			out[i].Resources.Limits = corev1.ResourceList{workload.GPUResource: q}
		}
		if q, ok := c.Resources.Requests[workload.GPUResource]; ok {
			out[i].Resources.Requests = corev1.ResourceList{workload.GPUResource: q}
		}
	}
	return out
}
