package kube

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/quota"
)

// CachedPod is a pod as the pod cache keeps it (see StripPod). It
// implements client.Object so the informer can key, index and replace it;
// the metadata it does not keep reads as empty and its setters for it do
// nothing.
type CachedPod struct {
	name, namespace, resourceVersion string
	// held is what the pod holds of its project's quota; nil for most pods
	// (preemptible, no GPUs, terminated, being deleted).
	held *quota.HeldPod
}

var _ client.Object = (*CachedPod)(nil)

// Held is what the pod holds of its project's quota (nil: nothing).
func (p *CachedPod) Held() *quota.HeldPod { return p.held }

// DeepCopyObject implements runtime.Object.
func (p *CachedPod) DeepCopyObject() runtime.Object {
	c := *p
	if p.held != nil {
		h := *p.held
		c.held = &h
	}
	return &c
}

// GetObjectKind implements runtime.Object: a cached pod carries no type meta.
func (p *CachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// metav1.Object: what is kept.

func (p *CachedPod) GetNamespace() string                          { return p.namespace }
func (p *CachedPod) SetNamespace(namespace string)                 { p.namespace = namespace }
func (p *CachedPod) GetName() string                               { return p.name }
func (p *CachedPod) SetName(name string)                           { p.name = name }
func (p *CachedPod) GetResourceVersion() string                    { return p.resourceVersion }
func (p *CachedPod) SetResourceVersion(version string)             { p.resourceVersion = version }
func (p *CachedPod) GetGenerateName() string                       { return "" }
func (p *CachedPod) SetGenerateName(string)                        {}
func (p *CachedPod) GetUID() types.UID                             { return "" }
func (p *CachedPod) SetUID(types.UID)                              {}
func (p *CachedPod) GetGeneration() int64                          { return 0 }
func (p *CachedPod) SetGeneration(int64)                           {}
func (p *CachedPod) GetSelfLink() string                           { return "" }
func (p *CachedPod) SetSelfLink(string)                            {}
func (p *CachedPod) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (p *CachedPod) SetCreationTimestamp(metav1.Time)              {}
func (p *CachedPod) GetDeletionTimestamp() *metav1.Time            { return nil }
func (p *CachedPod) SetDeletionTimestamp(*metav1.Time)             {}
func (p *CachedPod) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (p *CachedPod) SetDeletionGracePeriodSeconds(*int64)          {}
func (p *CachedPod) GetLabels() map[string]string                  { return nil }
func (p *CachedPod) SetLabels(map[string]string)                   {}
func (p *CachedPod) GetAnnotations() map[string]string             { return nil }
func (p *CachedPod) SetAnnotations(map[string]string)              {}
func (p *CachedPod) GetFinalizers() []string                       { return nil }
func (p *CachedPod) SetFinalizers([]string)                        {}
func (p *CachedPod) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (p *CachedPod) SetOwnerReferences([]metav1.OwnerReference)    {}
func (p *CachedPod) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (p *CachedPod) SetManagedFields([]metav1.ManagedFieldsEntry)  {}
