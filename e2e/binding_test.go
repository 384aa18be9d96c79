package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/bind"
)

func projectsBoundTo(ns string) []string {
	var ids []string
	for _, p := range env.Sim.Projects() {
		if p.BoundNamespace() == ns || (p.RequestedNamespace != nil && *p.RequestedNamespace == ns) {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

func waitGone(t *testing.T, ns string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		var got corev1.Namespace
		return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKey{Name: ns}, &got))
	}, within, 200*time.Millisecond, "namespace %s not deleted within %s", ns, within)
}

// 50 managed namespaces get 50 Run:ai projects in the departments their
// labels map to, with the ownership label.
func TestFiftyNamespacesBoundInTheirDepartments(t *testing.T) {
	var docs []string
	want := map[string]string{}
	for i := 0; i < 50; i++ {
		ns := fmt.Sprintf("e2e-many-%02d", i)
		dept, runaiDept := "", "default"
		switch i % 4 {
		case 1:
			dept, runaiDept = "research", "research"
		case 2:
			dept, runaiDept = "vision", "vision"
		case 3:
			dept, runaiDept = "marketing", "default" // no Run:ai twin
		}
		want[ns] = runaiDept
		docs = append(docs, namespaceYAML(ns, dept))
		deleteNamespaceAtEnd(t, ns)
	}
	start := time.Now()
	kubectlOK(t, strings.Join(docs, "---\n"), "apply", "-f", "-")
	t.Logf("50 namespaces created in %s (creation does not wait for Run:ai)", time.Since(start).Round(time.Millisecond))
	deptByID := map[string]string{}
	for _, d := range env.Sim.Departments() {
		deptByID[d.ID] = d.Name
	}
	for ns, dept := range want {
		got := waitBound(t, ns, 30*time.Second)
		assert.Equal(t, ns, got.Labels[queueLabel])
		p, ok := env.Sim.ProjectByName(ns)
		require.True(t, ok, ns)
		assert.Equal(t, p.ID, got.Labels[idLabel], ns)
		assert.Equal(t, dept, deptByID[p.ParentID], "%s is in the Run:ai department its label maps to", ns)
		assert.Len(t, projectsBoundTo(ns), 1, "exactly one Run:ai project for %s", ns)
		assert.Contains(t, got.Finalizers, bind.Finalizer)
	}
	t.Logf("50 namespaces bound in %s", time.Since(start).Round(time.Millisecond))
}

// A project already bound to the namespace in Run:ai is adopted and is never
// deleted with the namespace.
func TestAdoptedProjectKeptOnNamespaceDelete(t *testing.T) {
	ns := "e2e-adopted"
	kubectlOK(t, namespaceYAML(ns, "vision"), "apply", "-f", "-")
	got := waitBound(t, ns, 20*time.Second)
	assert.Equal(t, "legacy-team", got.Labels[queueLabel])
	assert.Empty(t, got.Labels[idLabel], "an adopted project carries no ownership label")
	before, ok := env.Sim.ProjectByName("legacy-team")
	require.True(t, ok)

	kubectlOK(t, "", "delete", "namespace", ns, "--wait=false")
	waitGone(t, ns, 60*time.Second)
	after, ok := env.Sim.ProjectByName("legacy-team")
	require.True(t, ok, "the adopted project survives its namespace")
	assert.Equal(t, before.ID, after.ID)
}

// A project we created goes with its namespace.
func TestOwnedProjectDeletedWithNamespace(t *testing.T) {
	ns := "e2e-owned-delete"
	kubectlOK(t, namespaceYAML(ns, ""), "apply", "-f", "-")
	waitBound(t, ns, 20*time.Second)
	require.Len(t, projectsBoundTo(ns), 1)
	kubectlOK(t, "", "delete", "namespace", ns, "--wait=false")
	waitGone(t, ns, 60*time.Second)
	assert.Empty(t, projectsBoundTo(ns), "no Run:ai project left for a deleted namespace")
}

// Run:ai down while namespaces are created: they exist at once, and are bound
// by the first pass after Run:ai is back.
func TestRunAIDownDuringNamespaceCreation(t *testing.T) {
	require.NoError(t, env.Sim.SetDown(true))
	t.Cleanup(func() { _ = env.Sim.SetDown(false) })
	names := []string{"e2e-outage-a", "e2e-outage-b", "e2e-outage-c"}
	var docs []string
	for _, ns := range names {
		docs = append(docs, namespaceYAML(ns, "research"))
		deleteNamespaceAtEnd(t, ns)
	}
	start := time.Now()
	kubectlOK(t, strings.Join(docs, "---\n"), "apply", "-f", "-")
	assert.Less(t, time.Since(start), 10*time.Second, "namespace creation never waits for Run:ai")
	time.Sleep(time.Second)
	for _, ns := range names {
		assert.Empty(t, getNamespace(t, ns).Labels[queueLabel], "%s cannot be bound while Run:ai is down", ns)
	}
	require.NoError(t, env.Sim.SetDown(false))
	res, err := env.Controller.Pass(ctxT(t, 60*time.Second))
	require.NoError(t, err)
	t.Logf("pass after the outage: %+v", res)
	for _, ns := range names {
		assert.Equal(t, ns, getNamespace(t, ns).Labels[queueLabel], "%s bound by the first pass after Run:ai returned", ns)
		assert.Len(t, projectsBoundTo(ns), 1)
	}
}

// Run:ai down while a namespace is deleted: the namespace waits (finalizer),
// and the project is deleted once Run:ai is back. Nothing leaks.
func TestRunAIDownDuringNamespaceDeletion(t *testing.T) {
	ns := "e2e-outage-delete"
	kubectlOK(t, namespaceYAML(ns, ""), "apply", "-f", "-")
	waitBound(t, ns, 20*time.Second)
	require.Len(t, projectsBoundTo(ns), 1)

	require.NoError(t, env.Sim.SetDown(true))
	t.Cleanup(func() { _ = env.Sim.SetDown(false) })
	require.NoError(t, env.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	time.Sleep(3 * time.Second)
	got := getNamespace(t, ns)
	assert.NotNil(t, got.DeletionTimestamp, "terminating")
	assert.Contains(t, got.Finalizers, bind.Finalizer, "held until its Run:ai project is deleted")
	require.NoError(t, env.Sim.SetDown(false))
	waitGone(t, ns, 60*time.Second)
	assert.Empty(t, projectsBoundTo(ns), "the project was deleted once Run:ai came back")
}
