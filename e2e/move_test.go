package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

func deptName(id string) string {
	for _, d := range env.Sim.Departments() {
		if d.ID == id {
			return d.Name
		}
	}
	return ""
}

func project(t *testing.T, name string) runai.Project {
	t.Helper()
	p, ok := env.Sim.ProjectByName(name)
	require.True(t, ok, "Run:ai project %s", name)
	return p
}

func deserved(p runai.Project) float64 {
	for _, r := range p.Resources {
		return r.DeservedGPU()
	}
	return -1
}

func TestDepartmentMoveSameMappingDoesNothing(t *testing.T) {
	ns := "e2e-move-same"
	deleteNamespaceAtEnd(t, ns)
	kubectlOK(t, namespaceYAML(ns, "marketing"), "apply", "-f", "-") // no Run:ai twin: default
	waitBound(t, ns, 20*time.Second)
	id := project(t, ns).ID
	writes := simWrites(id)
	_, stderr := kubectlOK(t, "", "label", "ns", ns, deptLabel+"=sales", "--overwrite") // also default
	assert.Contains(t, stderr, "both departments map to Run:ai department default; nothing changes in Run:ai")
	assert.Equal(t, writes, simWrites(id))
}

func TestDepartmentMoveRefusedWithPendingPod(t *testing.T) {
	ns := "e2e-move-pods"
	boundNamespace(t, ns)
	kubectlOK(t, podYAML(ns, "waiting-job", "job", 0, nil, ""), "apply", "-f", "-")
	stderr := kubectlFails(t, "", "label", "ns", ns, deptLabel+"=research", "--overwrite")
	assert.Contains(t, stderr, "cannot move to department research while 1 pod(s) run or wait in it (waiting-job)")
	assert.Empty(t, getNamespace(t, ns).Labels[deptLabel], "label unchanged")
	assert.Equal(t, "default", deptName(project(t, ns).ParentID))
}

func TestDepartmentMoveRecreatesWithoutQuota(t *testing.T) {
	ns := "e2e-move-clean"
	boundNamespace(t, ns)
	before := project(t, ns)
	require.Equal(t, 2.0, deserved(before))

	// The preview changes nothing.
	writes := simWrites(before.ID)
	_, stderr := kubectlOK(t, "", "label", "ns", ns, deptLabel+"=research", "--overwrite", "--dry-run=server")
	assert.Contains(t, stderr, "would delete Run:ai project "+ns)
	assert.Contains(t, stderr, "create it again in department research with no GPU quota")
	assert.Equal(t, writes, simWrites(before.ID), "dry run leaves the simulator untouched")

	_, stderr = kubectlOK(t, "", "label", "ns", ns, deptLabel+"=research", "--overwrite")
	assert.Contains(t, stderr, "re-add the project's GPU quota and access rules in Run:ai")
	after := project(t, ns)
	assert.NotEqual(t, before.ID, after.ID)
	assert.Equal(t, "research", deptName(after.ParentID))
	assert.Equal(t, 0.0, deserved(after), "the new project has no GPU quota")
	got := getNamespace(t, ns)
	assert.Equal(t, "research", got.Labels[deptLabel])
	assert.Equal(t, after.ID, got.Labels[idLabel], "the ownership label follows the new project")
	assert.Equal(t, ns, got.Labels[queueLabel])
}

func TestDepartmentMoveRollsBackWhenCreationFails(t *testing.T) {
	ns := "e2e-move-rollback"
	boundNamespace(t, ns)
	before := project(t, ns)
	vision, ok := env.Sim.DepartmentByName("vision")
	require.True(t, ok)
	env.Sim.AddFault(runaitest.Fault{Method: "POST", PathPrefix: "/api/v1/org-unit/projects", Status: 503, BodyContains: `"parentId":"` + vision.ID + `"`})
	t.Cleanup(env.Sim.ClearFaults)

	stderr := kubectlFails(t, "", "label", "ns", ns, deptLabel+"=vision", "--overwrite")
	assert.Contains(t, stderr, "it was created again in department default with its old quota and scheduling settings")
	after := project(t, ns)
	assert.Equal(t, "default", deptName(after.ParentID), "back in the old department")
	assert.Equal(t, deserved(before), deserved(after), "with its old quota")
	got := getNamespace(t, ns)
	assert.Empty(t, got.Labels[deptLabel], "the label change was refused")
	assert.Equal(t, after.ID, got.Labels[idLabel])
}

func TestAdoptedProjectNeverMovedReportsDrift(t *testing.T) {
	ns := "e2e-move-adopted"
	env.Sim.AddProject(runaitest.ProjectSeed{Name: "their-project", Department: "default", Namespace: ns, DeservedGPUs: 1})
	deleteNamespaceAtEnd(t, ns)
	kubectlOK(t, namespaceYAML(ns, ""), "apply", "-f", "-")
	got := waitBound(t, ns, 20*time.Second)
	require.Equal(t, "their-project", got.Labels[queueLabel])
	theirs := project(t, "their-project").ID
	writes := simWrites(theirs)
	_, stderr := kubectlOK(t, "", "label", "ns", ns, deptLabel+"=research", "--overwrite")
	assert.Contains(t, stderr, "was adopted, not created by Hopsworks")
	assert.Equal(t, writes, simWrites(theirs), "an adopted project is never touched")
	// The pass reads namespaces from the controller's cache, which sees the
	// label change a moment after kubectl returns.
	require.Eventually(t, func() bool {
		res, err := env.Controller.Pass(context.Background())
		return err == nil && res.Drift >= 1
	}, 10*time.Second, 200*time.Millisecond, "the pass reports the adopted project's drift")
	assert.Contains(t, getNamespace(t, ns).Annotations["runai-webhook.hopsworks.ai/status"], "RUN_AI_DEPARTMENT_DRIFT")
	assert.Equal(t, "default", deptName(project(t, "their-project").ParentID))
}
