package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/app"
	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/ops"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

var keys = nsview.Keys{Queue: queueLabel, Project: projectLabel, Department: deptLabel}

// Deleting a department moves its namespaces one at a time and stops at the
// first one with a pod; --dry-run changes nothing.
func TestDepartmentDeleteStopsAtFirstNamespaceWithPod(t *testing.T) {
	names := []string{"e2e-dd-a", "e2e-dd-b", "e2e-dd-c"}
	for _, ns := range names {
		deleteNamespaceAtEnd(t, ns)
		kubectlOK(t, namespaceYAML(ns, "vision"), "apply", "-f", "-")
		waitBound(t, ns, 20*time.Second)
	}
	kubectlOK(t, podYAML("e2e-dd-b", "busy", "job", 0, nil, ""), "apply", "-f", "-")
	w := &ops.Warnings{}
	c, err := ops.NewClient(env.Admin, client.Options{Scheme: app.Scheme()}, w)
	require.NoError(t, err)

	ids := []string{project(t, "e2e-dd-a").ID, project(t, "e2e-dd-b").ID, project(t, "e2e-dd-c").ID}
	writes := simWrites(ids...)
	var out bytes.Buffer
	res, err := ops.DeleteDepartment(context.Background(), c, w, keys, "vision", true, &out)
	t.Log(out.String())
	require.Error(t, err, "the dry run meets the namespace with a pod too")
	assert.Equal(t, []string{"e2e-dd-a"}, res.Moved)
	assert.Contains(t, out.String(), "would delete Run:ai project e2e-dd-a")
	assert.Equal(t, writes, simWrites(ids...), "--dry-run changes nothing")
	assert.Equal(t, "vision", getNamespace(t, "e2e-dd-a").Labels[deptLabel])

	out.Reset()
	res, err = ops.DeleteDepartment(context.Background(), c, w, keys, "vision", false, &out)
	t.Log(out.String())
	require.Error(t, err)
	assert.Equal(t, []string{"e2e-dd-a"}, res.Moved)
	assert.Equal(t, []string{"e2e-dd-b", "e2e-dd-c"}, res.Remaining)
	assert.Contains(t, res.Refused, "while 1 pod(s) run or wait in it (busy)")
	assert.Empty(t, getNamespace(t, "e2e-dd-a").Labels[deptLabel], "moved to the default department")
	assert.Equal(t, "default", deptName(project(t, "e2e-dd-a").ParentID))
	assert.Equal(t, "vision", getNamespace(t, "e2e-dd-b").Labels[deptLabel], "the department keeps the rest")
	assert.Equal(t, "vision", getNamespace(t, "e2e-dd-c").Labels[deptLabel])
}

// With the integration off: no Run:ai call at all, pods pass untouched,
// bound namespaces report RUN_AI_BINDING_LEFT; `leave` (dry run first)
// deletes the projects we created, keeps adopted ones and unbinds; the
// Kueue preflight fails while a namespace is bound and passes after.
func TestIntegrationOffLeaveAndKueuePreflight(t *testing.T) {
	off, err := framework.Start(context.Background(), framework.Options{
		Seed:      Seed(),
		Configure: func(c *config.Config) { c.RunAIEnable = false },
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = off.Stop() })
	ctx := context.Background()

	// Namespaces bound while the integration was on: one owned, one adopted.
	api, err := runai.NewClient(runai.ClientConfig{BaseURL: off.Sim.URL(), ClientID: framework.ClientID, ClientSecret: framework.ClientSecret})
	require.NoError(t, err)
	cluster, err := api.Cluster(ctx)
	require.NoError(t, err)
	pool, err := api.DefaultNodePool(ctx, cluster.UUID)
	require.NoError(t, err)
	def, ok := off.Sim.DepartmentByName("default")
	require.True(t, ok)
	owned, err := api.CreateProject(ctx, bind.NewProjectRequest(cluster.UUID, def.ID, "off-owned", pool, 1))
	require.NoError(t, err)
	webhookCfg, err := off.UserConfig(framework.WebhookUser)
	require.NoError(t, err)
	asWebhook, err := client.New(webhookCfg, client.Options{Scheme: app.Scheme()})
	require.NoError(t, err)
	for name, l := range map[string]map[string]string{
		"off-owned":   {queueLabel: "off-owned", idLabel: owned.ID},
		"e2e-adopted": {queueLabel: "legacy-team"},
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{projectLabel: name}}}
		require.NoError(t, off.Client.Create(ctx, ns))
		patch := client.MergeFrom(ns.DeepCopy())
		for k, v := range l {
			ns.Labels[k] = v
		}
		require.NoError(t, asWebhook.Patch(ctx, ns, patch), "only the webhook writes binding labels")
	}

	// Off: pods pass untouched and Run:ai hears nothing.
	calls := len(off.Sim.Calls())
	pod := corePod("off-owned", "nb", "notebook", 8)
	require.NoError(t, off.Client.Create(ctx, pod))
	assert.Equal(t, "default-scheduler", pod.Spec.SchedulerName)
	assert.Empty(t, pod.Labels[queueLabel])
	res, err := off.Controller.Pass(ctx)
	require.NoError(t, err)
	t.Logf("pass with the integration off: %+v", res)
	var ns corev1.Namespace
	require.NoError(t, off.Client.Get(ctx, client.ObjectKey{Name: "off-owned"}, &ns))
	assert.Contains(t, ns.Annotations[bind.StatusAnnotation], bind.StatusBindingLeft)
	assert.Equal(t, calls, len(off.Sim.Calls()), "no call to Run:ai at all while the integration is off")

	// The Kueue preflight fails while namespaces are bound.
	bin := buildCLI(t)
	out, err := exec.Command(bin, "preflight", "kueue", "--kubeconfig", off.AdminKubeconfig).CombinedOutput()
	require.Error(t, err, string(out))
	assert.Contains(t, string(out), "2 namespace(s) still bound to Run:ai")

	// leave --dry-run changes nothing.
	var buf bytes.Buffer
	c, err := client.New(off.Admin, client.Options{Scheme: app.Scheme()})
	require.NoError(t, err)
	writes := off.Sim.CountWrites()
	_, err = ops.Leave(ctx, c, api, keys, true, &buf)
	require.NoError(t, err)
	t.Log(buf.String())
	assert.Equal(t, writes, off.Sim.CountWrites())
	require.NoError(t, off.Client.Get(ctx, client.ObjectKey{Name: "off-owned"}, &ns))
	assert.Equal(t, "off-owned", ns.Labels[queueLabel])

	// leave, through the CLI binary.
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte(framework.ClientSecret), 0o600))
	out, err = exec.Command(bin, "leave", "--yes", "--kubeconfig", off.AdminKubeconfig, "--run_ai_url", off.Sim.URL(),
		"--run_ai_client_id", framework.ClientID, "--run_ai_client_secret_file", secret).CombinedOutput()
	require.NoError(t, err, string(out))
	t.Log(string(out))
	assert.Contains(t, string(out), "left Run:ai: 1 Run:ai project(s) deleted, 1 adopted kept, 2 namespace(s) unbound")
	_, exists := off.Sim.ProjectByName("off-owned")
	assert.False(t, exists, "the project we created is deleted")
	_, exists = off.Sim.ProjectByName("legacy-team")
	assert.True(t, exists, "the adopted project is kept")
	for _, name := range []string{"off-owned", "e2e-adopted"} {
		require.NoError(t, off.Client.Get(ctx, client.ObjectKey{Name: name}, &ns))
		assert.NotContains(t, ns.Labels, queueLabel, name)
		assert.NotContains(t, ns.Labels, idLabel, name)
	}
	out, err = exec.Command(bin, "preflight", "kueue", "--kubeconfig", off.AdminKubeconfig).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "Kueue can be enabled")
}

// buildCLI builds the runai-webhook binary once per test binary.
func buildCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "runai-webhook-cli-")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "runai-webhook")
		cmd := exec.Command("go", "build", "-o", cliPath, "./cmd/webhook")
		cmd.Dir = env.Root
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = err
			cliPath = string(out)
		}
	})
	require.NoError(t, cliErr, cliPath)
	return cliPath
}
