package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A managed namespace is bound by the controller, and its pod passes through
// the webhooks installed from manifests/: queue label and scheduler injected.
func TestManagedNamespaceAndPodThroughInstalledWebhooks(t *testing.T) {
	ns := "e2e-basic"
	deleteNamespaceAtEnd(t, ns)
	kubectlOK(t, namespaceYAML(ns, "research"), "apply", "-f", "-")
	bound := waitBound(t, ns, 20*time.Second)
	assert.Equal(t, ns, bound.Labels[queueLabel])
	assert.NotEmpty(t, bound.Labels[idLabel], "a project we created carries its id")

	kubectlOK(t, podYAML(ns, "worker", "job", 0, nil, ""), "apply", "-f", "-")
	pod := getPod(t, ns, "worker")
	assert.Equal(t, ns, pod.Labels[queueLabel])
	assert.Equal(t, "runai-scheduler", pod.Spec.SchedulerName)
}

// A namespace outside the selector never reaches the server: the API server
// filters it with the installed namespaceSelector.
func TestNamespaceOutsideSelectorNeverReachesServer(t *testing.T) {
	ns := "e2e-unmanaged"
	deleteNamespaceAtEnd(t, ns)
	kubectlOK(t, "", "create", "namespace", ns)
	before := admissionCount(t, "")
	for i, name := range []string{"a", "b", "c"} {
		_ = i
		kubectlOK(t, podYAML(ns, name, "notebook", 1, nil, ""), "apply", "-f", "-")
	}
	assert.Equal(t, before, admissionCount(t, ""), "no review reached the webhook for an unmanaged namespace")
	pod := getPod(t, ns, "a")
	assert.Equal(t, "default-scheduler", pod.Spec.SchedulerName)
	assert.Empty(t, pod.Labels[queueLabel])
}

// --dry-run=server reaches the server with dryRun=true, shows the mutation,
// prints our warning, and writes nothing to Run:ai.
func TestDryRunShowsMutationAndWarning(t *testing.T) {
	ns := "e2e-dryrun"
	deleteNamespaceAtEnd(t, ns)
	kubectlOK(t, namespaceYAML(ns, ""), "apply", "-f", "-")
	waitBound(t, ns, 20*time.Second)
	writes := simWrites(project(t, ns).ID)
	out, stderr := kubectlOK(t, podYAML(ns, "nb", "notebook", 1, nil, ""), "apply", "--dry-run=server", "-o", "yaml", "-f", "-")
	assert.Contains(t, out, "runai/queue: "+ns)
	assert.Contains(t, out, "schedulerName: runai-scheduler")
	assert.Contains(t, stderr, "Warning: runai-webhook: pod would be queued in Run:ai project "+ns)
	assert.Contains(t, stderr, "fits in Run:ai project "+ns+"'s GPU quota")
	assert.Equal(t, writes, simWrites(project(t, ns).ID), "a dry run writes nothing to Run:ai")
	var p corev1.Pod
	assert.Error(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "nb"}, &p), "nothing stored")
}

// A Deployment's pods, created by kube-controller-manager with generateName
// and no name at admission, are admitted the same way as a bare pod.
func TestDeploymentPodAdmittedLikeBarePod(t *testing.T) {
	ns := "e2e-deploy"
	deleteNamespaceAtEnd(t, ns)
	kubectlOK(t, namespaceYAML(ns, ""), "apply", "-f", "-")
	waitBound(t, ns, 20*time.Second)
	kubectlOK(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: `+ns+`}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, hopsworks.ai/workload-type: app}}
    spec:
      containers: [{name: web, image: registry.invalid/web:1}]
`, "apply", "-f", "-")
	var pods corev1.PodList
	require.Eventually(t, func() bool {
		_ = env.Client.List(context.Background(), &pods, client.InNamespace(ns))
		return len(pods.Items) == 2
	}, 60*time.Second, 200*time.Millisecond, "kube-controller-manager creates the Deployment's pods")
	for _, p := range pods.Items {
		assert.True(t, strings.HasPrefix(p.Name, "web-"), p.Name)
		assert.Equal(t, ns, p.Labels[queueLabel], p.Name)
		assert.Equal(t, "runai-scheduler", p.Spec.SchedulerName, p.Name)
	}
	var d appsv1.Deployment
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &d))
}
