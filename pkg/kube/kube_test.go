package kube

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/hopsworks/runai-webhook/pkg/mutate"
	"github.com/hopsworks/runai-webhook/pkg/quota"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

func pod(ns, name, typ string, gpus string, mutate_ func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "7",
		Labels:      map[string]string{workload.TypeLabel: typ, "runai/queue": ns, "app": "x"},
		Annotations: map[string]string{mutate.ReservationAnnotation: "uid-" + name, "other": "y"}}}
	p.Spec.SchedulerName = "runai-scheduler"
	p.Spec.Containers = []corev1.Container{{Name: "main", Image: "img", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}
	if gpus != "" {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{workload.GPUResource: resource.MustParse(gpus)}
	}
	p.Status.Phase = corev1.PodPending
	if mutate_ != nil {
		mutate_(p)
	}
	return p
}

// fixture: which pods of team-a hold quota, and which do not.
func fixture() (pods []*corev1.Pod, want []quota.HeldPod) {
	now := metav1.Now()
	pods = []*corev1.Pod{
		pod("team-a", "nb-gpu", "notebook", "1", nil),
		pod("team-a", "app-2gpu-running", "app", "2", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }),
		pod("team-a", "job-nonpreemptible", "job", "1", func(p *corev1.Pod) { p.Labels[workload.PreemptibilityLabel] = workload.NonPreemptibleValue }),
		pod("team-a", "nb-fraction", "notebook", "", func(p *corev1.Pod) { p.Annotations[workload.GPUFractionAnnotation] = "0.5" }),
		pod("team-a", "nb-done", "notebook", "1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("team-a", "nb-failed", "notebook", "1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
		pod("team-a", "nb-deleting", "notebook", "1", func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Finalizers = []string{"x"} }),
		pod("team-a", "job-gpu", "job", "4", nil),
		pod("team-a", "nb-cpu", "notebook", "", nil),
		pod("team-a", "nb-bad-gpu", "notebook", "500m", nil),
		pod("team-b", "nb-other-namespace", "notebook", "1", nil),
	}
	want = []quota.HeldPod{
		{ReservationKey: "uid-app-2gpu-running", GPUs: 2},
		{ReservationKey: "uid-job-nonpreemptible", GPUs: 1},
		{ReservationKey: "uid-nb-fraction", GPUs: 0.5},
		{ReservationKey: "uid-nb-gpu", GPUs: 1},
	}
	return pods, want
}

func sorted(h []quota.HeldPod) []quota.HeldPod {
	sort.Slice(h, func(i, j int) bool { return h[i].ReservationKey < h[j].ReservationKey })
	return h
}

// indexerSource is controller-runtime's cache as Pods sees it: an informer
// whose indexer holds what the transform made.
type indexerSource struct {
	client.Reader
	inf toolscache.SharedIndexInformer
}

func (s indexerSource) GetInformer(context.Context, client.Object, ...crcache.InformerGetOption) (crcache.Informer, error) {
	return s.inf, nil
}

// TestHeldNonPreemptibleFromCompactCache: the quota's view of the pod cache
// is the same whether the cache holds typed pods (no transform, or a fake
// client) or the compact pods StripPod makes, through a real informer fed
// by list and watch events.
func TestHeldNonPreemptibleFromCompactCache(t *testing.T) {
	pods, want := fixture()

	// Typed: a fake client.
	var objs []client.Object
	for _, p := range pods {
		objs = append(objs, p.DeepCopy())
	}
	typed := Pods{Cache: fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build()}
	assert.Equal(t, want, sorted(typed.HeldNonPreemptible("team-a")), "typed pods")

	// Compact: a client-go informer with the transform, filled by a list
	// then a watch, and by a watch list (streamed initial events, what
	// client-go does against a current API server).
	for _, mode := range []string{"list", "watch list"} {
		t.Run(mode, func(t *testing.T) {
			fw := watch.NewFakeWithChanSize(len(pods)+10, false)
			lw := &toolscache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (k8sruntime.Object, error) {
					list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
					for _, p := range pods {
						list.Items = append(list.Items, *p.DeepCopy())
					}
					return list, nil
				},
				WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
					if o.SendInitialEvents != nil && *o.SendInitialEvents {
						for _, p := range pods {
							fw.Add(p.DeepCopy())
						}
						fw.Action(watch.Bookmark, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
							Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
					}
					return fw, nil
				},
			}
			var lwi toolscache.ListerWatcher = lw
			if mode == "list" {
				lwi = noWatchList{lw}
			}
			inf := toolscache.NewSharedIndexInformer(lwi, &corev1.Pod{}, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
			require.NoError(t, inf.SetTransform(StripPod("runai/queue")))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			go inf.RunWithContext(ctx)
			require.True(t, toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced), "informer synced")
			compact := Pods{Cache: indexerSource{inf: inf}}
			assert.Equal(t, want, sorted(compact.HeldNonPreemptible("team-a")), "compact pods after the initial sync")
			for _, o := range inf.GetIndexer().List() {
				require.IsType(t, &CachedPod{}, o, "the cache keeps compact pods only")
			}

			// Watch events: a new GPU terminal, a notebook finishes, an app is deleted.
			fw.Add(pod("team-a", "nb-new", "terminal", "1", func(p *corev1.Pod) { p.ResourceVersion = "11" }))
			fw.Modify(pod("team-a", "nb-gpu", "notebook", "1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded; p.ResourceVersion = "12" }))
			fw.Delete(pod("team-a", "app-2gpu-running", "app", "2", func(p *corev1.Pod) { p.ResourceVersion = "13" }))
			after := []quota.HeldPod{
				{ReservationKey: "uid-job-nonpreemptible", GPUs: 1},
				{ReservationKey: "uid-nb-fraction", GPUs: 0.5},
				{ReservationKey: "uid-nb-new", GPUs: 1},
			}
			require.Eventually(t, func() bool {
				return assert.ObjectsAreEqual(after, sorted(compact.HeldNonPreemptible("team-a")))
			}, 5*time.Second, 10*time.Millisecond, "compact pods after watch events: %v", compact.HeldNonPreemptible("team-a"))
			assert.Len(t, compact.HeldNonPreemptible("team-b"), 1)
			assert.Empty(t, compact.HeldNonPreemptible("team-c"))
			assert.Len(t, inf.GetIndexer().List(), len(pods))
		})
	}
}

// noWatchList is a ListerWatcher that opts out of watch lists (list, then watch).
type noWatchList struct{ *toolscache.ListWatch }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// TestStripPodIsIdempotent: the transform may see its own output (watch
// list) and tombstones; it passes both through.
func TestStripPodIsIdempotent(t *testing.T) {
	tr := StripPod("runai/queue")
	out, err := tr(pod("team-a", "nb", "notebook", "1", nil))
	require.NoError(t, err)
	c := out.(*CachedPod)
	assert.Equal(t, "nb", c.GetName())
	assert.Equal(t, "team-a", c.GetNamespace())
	assert.Equal(t, "7", c.GetResourceVersion())
	assert.Equal(t, &quota.HeldPod{ReservationKey: "uid-nb", GPUs: 1}, c.Held())
	again, err := tr(out)
	require.NoError(t, err)
	assert.Same(t, c, again)
	tomb := toolscache.DeletedFinalStateUnknown{Key: "team-a/nb", Obj: c}
	same, err := tr(tomb)
	require.NoError(t, err)
	assert.Equal(t, tomb, same)
	key, err := toolscache.MetaNamespaceKeyFunc(c)
	require.NoError(t, err)
	assert.Equal(t, "team-a/nb", key)
	cp := c.DeepCopyObject().(*CachedPod)
	assert.Equal(t, c, cp)
	assert.NotSame(t, c.held, cp.held)
}

// Memory budget of one cached pod (object, name and resource version; the
// namespace is shared), about 20% above what go1.26 measures (~96 bytes).
// A typed pod, even emptied, costs 1,280 bytes for its struct alone.
const cachedPodBudget = 120

// TestCachedPodMemory is the pod cache's memory regression guard: the heap
// kept by StripPod's output for typical pods stays under the budget.
func TestCachedPodMemory(t *testing.T) {
	const n = 20000
	tr := StripPod("runai/queue")
	kept := make([]any, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range kept {
		typ, gpus := "job", ""
		if i%10 == 0 {
			typ, gpus = "notebook", "1"
		}
		// As decoded from the API server: every string its own allocation.
		p := pod(fmt.Sprintf("team-%03d", i%500), fmt.Sprintf("job-%07d-abcde", i), typ, gpus, func(p *corev1.Pod) {
			p.ResourceVersion = fmt.Sprint(1000000 + i)
			p.UID = "0b1c8d3e-5b6c-4d7e-8f90-a1b2c3d4e5f6"
		})
		kept[i], _ = tr(p)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Less the slice that keeps them alive (one interface per pod); the
	// informer's own index costs are not the transform's.
	perPod := (float64(after.HeapAlloc-before.HeapAlloc) - float64(n*16)) / n
	t.Logf("heap per cached pod: %.0f bytes (budget %d; 10%% of the pods hold GPUs)", perPod, cachedPodBudget)
	assert.LessOrEqual(t, perPod, float64(cachedPodBudget))
	runtime.KeepAlive(kept)
}
