package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// unboundNamespace creates a managed namespace while Run:ai is down, so the
// controller cannot bind it and the first pod is what binds it.
func unboundNamespace(t *testing.T, ns, dept string) {
	t.Helper()
	require.NoError(t, env.Sim.SetDown(true))
	t.Cleanup(func() { _ = env.Sim.SetDown(false) })
	deleteNamespaceAtEnd(t, ns)
	kubectlOK(t, namespaceYAML(ns, dept), "apply", "-f", "-")
	// Wait until the controller's bind has failed and backed off.
	require.Eventually(t, func() bool {
		// Events about a namespace (cluster-scoped) live in "default".
		var events corev1.EventList
		_ = env.Client.List(context.Background(), &events)
		for _, e := range events.Items {
			if e.Reason == "BindFailed" && e.InvolvedObject.Name == ns {
				return true
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "the controller tried to bind %s and failed", ns)
	require.Empty(t, getNamespace(t, ns).Labels[queueLabel])
}

func boundNamespace(t *testing.T, ns string) {
	t.Helper()
	deleteNamespaceAtEnd(t, ns)
	kubectlOK(t, namespaceYAML(ns, ""), "apply", "-f", "-")
	waitBound(t, ns, 20*time.Second)
}

func corePod(ns, name, typ string, gpus int64) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{typeLabel: typ}}}
	p.Spec.Containers = []corev1.Container{{Name: "main", Image: "registry.invalid/x:1"}}
	if gpus > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	return p
}

// The first pods of an unbound namespace bind it inside admission: 50 pods
// created at once give one Run:ai project, and every pod is queued in it.
func TestFirstPodBindsOnceUnderConcurrency(t *testing.T) {
	ns := "e2e-first-pod"
	unboundNamespace(t, ns, "research")
	require.NoError(t, env.Sim.SetDown(false))
	creates := env.Sim.CountCalls("POST", "/api/v1/org-unit/projects")
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs <- env.Client.Create(context.Background(), corePod(ns, fmt.Sprintf("p-%02d", i), "job", 0))
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, 1, env.Sim.CountCalls("POST", "/api/v1/org-unit/projects")-creates, "exactly one Run:ai create for 50 concurrent first pods")
	assert.Len(t, projectsBoundTo(ns), 1)
	assert.Equal(t, ns, getNamespace(t, ns).Labels[queueLabel])
	var pods corev1.PodList
	require.NoError(t, env.Client.List(context.Background(), &pods, client.InNamespace(ns)))
	require.Len(t, pods.Items, 50)
	for _, p := range pods.Items {
		assert.Equal(t, ns, p.Labels[queueLabel], p.Name)
		assert.Equal(t, "runai-scheduler", p.Spec.SchedulerName, p.Name)
	}
}

// Run:ai down: the first pod of an unbound namespace is refused with a
// message that says why and that a retry works; a bound namespace is not
// affected (its pods need no Run:ai call).
func TestRunAIDownRefusesFirstPodOnlyInUnboundNamespaces(t *testing.T) {
	bound := "e2e-down-bound"
	boundNamespace(t, bound)
	ns := "e2e-down-unbound"
	unboundNamespace(t, ns, "")
	stderr := kubectlFails(t, podYAML(ns, "nb", "notebook", 0, nil, ""), "apply", "-f", "-")
	assert.Contains(t, stderr, "namespace "+ns+" is not bound to Run:ai yet")
	assert.Contains(t, stderr, "Retry later")
	kubectlOK(t, podYAML(bound, "nb", "notebook", 0, nil, ""), "apply", "-f", "-")
	assert.Equal(t, bound, getPod(t, bound, "nb").Labels[queueLabel])
}

// A user cannot escape the project's queue by labels or scheduler.
func TestEscapesRefused(t *testing.T) {
	ns := "e2e-escape"
	boundNamespace(t, ns)
	tests := []struct {
		name, yaml, want string
	}{
		{"spoofed queue label", podYAML(ns, "spoof", "job", 0, map[string]string{queueLabel: "someone-else"}, ""),
			"has runai/queue=someone-else, but namespace " + ns + " belongs to Run:ai project " + ns},
		{"GPU pod on another scheduler", podYAML(ns, "sched", "job", 1, nil, "my-scheduler"),
			`asks for GPUs with schedulerName "my-scheduler"`},
		{"Kueue queue label", podYAML(ns, "kueue", "job", 0, map[string]string{"kueue.x-k8s.io/queue-name": "lq"}, ""),
			"carries Kueue's label kueue.x-k8s.io/queue-name=lq"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Contains(t, kubectlFails(t, tt.yaml, "apply", "-f", "-"), tt.want)
		})
	}
	// A GPU pod that chose no scheduler is made right, not refused.
	kubectlOK(t, podYAML(ns, "fixed", "job", 1, nil, "default-scheduler"), "apply", "-f", "-")
	assert.Equal(t, "runai-scheduler", getPod(t, ns, "fixed").Spec.SchedulerName)
	// Relabelling a pod's queue after admission is refused too.
	stderr := kubectlFails(t, "", "label", "pod", "fixed", "-n", ns, queueLabel+"=other", "--overwrite")
	assert.Contains(t, stderr, "cannot change after creation")
}

// Notebooks over quota are refused with the GPUs left; a job of the same
// size is admitted (preemptible, may use idle GPUs over quota).
func TestNotebookOverQuotaRefusedJobAdmitted(t *testing.T) {
	ns := "e2e-quota"
	boundNamespace(t, ns) // new projects get 2 deserved GPUs in this suite
	kubectlOK(t, podYAML(ns, "nb-1", "notebook", 1, nil, ""), "apply", "-f", "-")
	kubectlOK(t, `apiVersion: v1
kind: Pod
metadata:
  name: nb-half
  namespace: `+ns+`
  labels: {hopsworks.ai/workload-type: terminal}
  annotations: {gpu-fraction: "0.5"}
spec:
  containers: [{name: main, image: registry.invalid/x:1}]
`, "apply", "-f", "-")
	stderr := kubectlFails(t, podYAML(ns, "nb-2", "notebook", 1, nil, ""), "apply", "-f", "-")
	assert.Contains(t, stderr, "project "+ns+" has 0.5 of 2 GPUs left for notebooks, terminals, apps and deployments; this pod asks for 1")
	kubectlOK(t, podYAML(ns, "job-1", "job", 1, nil, ""), "apply", "-f", "-")
	kubectlOK(t, podYAML(ns, "ray-1", "ray", 4, nil, ""), "apply", "-f", "-")

	// Dry run previews the refusal and stores nothing.
	stderr = kubectlFails(t, podYAML(ns, "nb-3", "deployment", 1, nil, ""), "apply", "--dry-run=server", "-f", "-")
	assert.Contains(t, stderr, "has 0.5 of 2 GPUs left")
	// Freeing a GPU makes room again.
	kubectlOK(t, "", "delete", "pod", "nb-1", "-n", ns, "--wait=true")
	require.Eventually(t, func() bool {
		_, _, err := env.Kubectl(context.Background(), podYAML(ns, "nb-2", "notebook", 1, nil, ""), "apply", "-f", "-")
		return err == nil
	}, 10*time.Second, 200*time.Millisecond, "a notebook fits once another stopped")
}

// A Deployment of GPU notebooks, whose pods kube-controller-manager creates,
// stops at the quota.
func TestDeploymentOfNotebooksStopsAtQuota(t *testing.T) {
	ns := "e2e-quota-deploy"
	boundNamespace(t, ns)
	kubectlOK(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: nb, namespace: `+ns+`}
spec:
  replicas: 4
  selector: {matchLabels: {app: nb}}
  template:
    metadata: {labels: {app: nb, hopsworks.ai/workload-type: deployment}}
    spec:
      containers:
      - name: nb
        image: registry.invalid/nb:1
        resources: {limits: {nvidia.com/gpu: 1}}
`, "apply", "-f", "-")
	count := func() int {
		var pods corev1.PodList
		_ = env.Client.List(context.Background(), &pods, client.InNamespace(ns))
		return len(pods.Items)
	}
	require.Eventually(t, func() bool { return count() == 2 }, 60*time.Second, 200*time.Millisecond)
	time.Sleep(3 * time.Second)
	assert.Equal(t, 2, count(), "2 deserved GPUs: the third and fourth replicas are refused")
	var events corev1.EventList
	require.Eventually(t, func() bool {
		_ = env.Client.List(context.Background(), &events, client.InNamespace(ns))
		for _, e := range events.Items {
			if e.Reason == "FailedCreate" && strings.Contains(e.Message, "GPUs left for notebooks") {
				return true
			}
		}
		return false
	}, 30*time.Second, 500*time.Millisecond, "the ReplicaSet reports the quota refusal")
}

// --dry-run=server on the first pod of an unbound namespace previews the
// binding and the mutation, and writes nothing to Run:ai.
func TestDryRunFirstPodPreviewsBindingWithoutWrites(t *testing.T) {
	ns := "e2e-dry-bind"
	unboundNamespace(t, ns, "research")
	require.NoError(t, env.Sim.SetDown(false))
	writes := simWrites()
	out, stderr := kubectlOK(t, podYAML(ns, "nb", "notebook", 1, nil, ""), "apply", "--dry-run=server", "-o", "yaml", "-f", "-")
	assert.Contains(t, stderr, "namespace "+ns+" would be bound to a new Run:ai project "+ns+" in department research")
	assert.Contains(t, out, "runai/queue: "+ns)
	assert.Contains(t, out, "schedulerName: runai-scheduler")
	assert.Equal(t, writes, simWrites(), "the simulator records no write")
	assert.Empty(t, getNamespace(t, ns).Labels[queueLabel], "still unbound")
}

// Only the webhook may write the binding labels; a user who may patch
// namespaces still cannot move one into another project's queue.
func TestUserCannotRelabelNamespace(t *testing.T) {
	ns := "e2e-relabel"
	boundNamespace(t, ns)
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-namespace-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "patch", "update"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-namespace-editor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice", APIGroup: "rbac.authorization.k8s.io"}}}
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, role)))
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, binding)))
	alice, err := env.UserKubeconfig("alice")
	require.NoError(t, err)
	for _, args := range [][]string{
		{"label", "ns", ns, queueLabel + "=other-team", "--overwrite"},
		{"label", "ns", ns, queueLabel + "-"},
		{"label", "ns", ns, idLabel + "=42", "--overwrite"},
	} {
		_, stderr, err := env.KubectlAs(ctxT(t, 30*time.Second), alice, "", args...)
		require.Error(t, err, args)
		assert.Contains(t, stderr, "user alice may not", args)
		assert.Contains(t, stderr, "written only by runai-webhook", args)
	}
	// Alice may still change what is hers to change.
	_, stderr, err := env.KubectlAs(ctxT(t, 30*time.Second), alice, "", "label", "ns", ns, "team=ml", "--overwrite")
	assert.NoError(t, err, stderr)
	assert.Equal(t, ns, getNamespace(t, ns).Labels[queueLabel])
}
