// Package kube adapts the Kubernetes API to the narrow views the decisions
// read: namespaces (cached, with a live read for a namespace the cache has
// not seen yet) and the non-preemptible GPU pods of a namespace (from a pod
// cache that keeps, per pod, only its key and what it holds of the quota, so
// 150,000 pods fit in a small heap).
package kube

import (
	"context"
	"fmt"
	"unique"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
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

// Pods answers quota.Pods from the pod cache. With the production cache
// (controller-runtime's, transformed by StripPod) it reads the informer's
// namespace index, whose entries are *CachedPod; any other reader (a fake
// client, a cache without the transform) is listed as typed pods.
type Pods struct {
	Cache client.Reader
}

// informerSource is the part of controller-runtime's cache.Cache that gives
// the informer of a kind.
type informerSource interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...crcache.InformerGetOption) (crcache.Informer, error)
}

// HeldNonPreemptible lists the namespace's running and waiting
// non-preemptible GPU pods.
func (p Pods) HeldNonPreemptible(namespace string) []quota.HeldPod {
	ctx := context.Background()
	if src, ok := p.Cache.(informerSource); ok {
		if inf, err := src.GetInformer(ctx, &corev1.Pod{}); err == nil {
			if ix, ok := inf.(interface{ GetIndexer() toolscache.Indexer }); ok {
				objs, err := ix.GetIndexer().ByIndex(toolscache.NamespaceIndex, namespace)
				if err != nil {
					return nil
				}
				var out []quota.HeldPod
				for _, o := range objs {
					switch pod := o.(type) {
					case *CachedPod:
						if pod.held != nil {
							out = append(out, *pod.held)
						}
					case *corev1.Pod:
						if h := heldOf(pod); h != nil {
							out = append(out, *h)
						}
					}
				}
				return out
			}
		}
	}
	var list corev1.PodList
	if err := p.Cache.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []quota.HeldPod
	for i := range list.Items {
		if h := heldOf(&list.Items[i]); h != nil {
			out = append(out, *h)
		}
	}
	return out
}

// heldOf is what a pod holds of its project's quota: nil unless it is
// running or waiting (not deleted, not terminated), non-preemptible and asks
// for GPUs.
func heldOf(pod *corev1.Pod) *quota.HeldPod {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	v := workload.FromCore(pod)
	if !v.NonPreemptible() {
		return nil
	}
	g, err := v.GPURequest()
	if err != nil || !g.Any() {
		return nil
	}
	return &quota.HeldPod{ReservationKey: pod.Annotations[mutate.ReservationAnnotation], GPUs: g.Total()}
}

// StripPod is the pod cache's transform. It replaces each pod with a
// *CachedPod: its name, namespace (interned: the pods of a namespace share
// one string) and resource version, plus, only for a pod that holds quota
// (see heldOf), its GPUs and admission id. The quota is the pod cache's only
// reader, and it needs no more. A *corev1.Pod costs at least 1,280 bytes
// even emptied (the struct alone), a CachedPod 64, so 150,000 pods fit in a
// few MiB plus the informer's index.
//
// Consequence: the manager's cached client cannot list or get pods (the
// cache holds no *corev1.Pod; controller-runtime answers "can't assign or
// convert"). Read pods through Pods, or live through the API reader.
//
// The transform is idempotent (it may run twice on one object during a watch
// list); queueLabel is unused since the cache keeps no labels.
func StripPod(queueLabel string) func(any) (any, error) {
	_ = queueLabel
	return func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil // a CachedPod already, or a tombstone
		}
		return NewCachedPod(pod), nil
	}
}

// NewCachedPod is what the pod cache keeps of pod.
func NewCachedPod(pod *corev1.Pod) *CachedPod {
	return &CachedPod{
		name:            pod.Name,
		namespace:       unique.Make(pod.Namespace).Value(),
		resourceVersion: pod.ResourceVersion,
		held:            heldOf(pod),
	}
}
