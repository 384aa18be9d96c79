package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/gpuview"
)

// The GPU and admin views through the whole stack: ServiceAccount tokens
// from the TokenRequest API, checked by the webhook with TokenReview, access
// decided by the API server's RBAC through SubjectAccessReview, the chart's
// gpu-viewer ClusterRole aggregated into the built-in `view` role by
// kube-controller-manager, and numbers from the Run:ai simulator.

func skipWithoutSimulator(t *testing.T) {
	t.Helper()
	if env.Sim == nil {
		t.Skip("needs the in-process Run:ai simulator and the local webhook URL")
	}
}

// serviceAccountToken creates ServiceAccount name in ns and returns a token
// for it from the TokenRequest API (envtest's users are certificate users,
// which cannot authenticate to the webhook).
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := env.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	cs, err := kubernetes.NewForConfig(env.Admin)
	require.NoError(t, err)
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, tr.Status.Token)
	return tr.Status.Token
}

func saSubject(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
}

// bindView lets the ServiceAccount view namespace ns (built-in `view`).
func bindView(t *testing.T, ns string, sa rbacv1.Subject) {
	t.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "view-" + sa.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{sa},
	}
	require.NoError(t, env.Client.Create(ctxT(t, 30*time.Second), rb))
}

// bindCluster binds a ClusterRole cluster-wide, removed when the test ends.
func bindCluster(t *testing.T, name, role string, sa rbacv1.Subject) {
	t.Helper()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{sa},
	}
	require.NoError(t, env.Client.Create(ctxT(t, 30*time.Second), crb))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crb) })
}

// gpuAdmin is a ServiceAccount in ns with cluster-wide `view` and the
// chart's runai-admin-viewer role: it may read every view.
func gpuAdmin(t *testing.T, ns, name string) string {
	t.Helper()
	sub := saSubject(ns, name)
	bindCluster(t, "e2e-"+name+"-view", "view", sub)
	bindCluster(t, "e2e-"+name+"-runai-admin", framework.ReleaseName+"-runai-admin-viewer", sub)
	tok := serviceAccountToken(t, ns, name)
	waitAllowed(t, sub, "", gpuview.ResourceRunAIAdmin)
	return tok
}

// waitAggregated waits until kube-controller-manager's clusterrole
// aggregation has copied the chart's gpu-viewer rule into `view`.
func waitAggregated(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var view rbacv1.ClusterRole
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "view"}, &view); err != nil {
			return false
		}
		for _, r := range view.Rules {
			for _, res := range r.Resources {
				if res == gpuview.ResourceGPUAvailability {
					return true
				}
			}
		}
		return false
	}, 60*time.Second, 200*time.Millisecond, "the chart's gpu-viewer ClusterRole is aggregated into view")
}

// waitAllowed waits until RBAC allows sa the view in ns ("" = cluster-wide),
// asked directly of the API server, so the webhook's short decision cache
// never holds a denial from before the binding took effect.
func waitAllowed(t *testing.T, sa rbacv1.Subject, ns, resource string) {
	t.Helper()
	user := "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
	require.Eventually(t, func() bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.Namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: gpuview.APIGroup, Resource: resource},
		}}
		return env.Client.Create(context.Background(), sar) == nil && sar.Status.Allowed
	}, 60*time.Second, 200*time.Millisecond, "%s may get %s in %q", user, resource, ns)
}

// viewGET calls the webhook's HTTPS port directly, trusting the test CA.
func viewGET(t *testing.T, method, path, token string) (int, []byte) {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(env.CertDir, "ca.crt"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), method, env.WebhookURL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

func decodeJSON[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v
}

func num(v float64) *float64 { return &v }

func TestGPUViewAndAdminViewThroughRBAC(t *testing.T) {
	skipWithoutSimulator(t)
	nsA, nsB, nsMkt := "e2e-gpu-a", "e2e-gpu-b", "e2e-gpu-mkt"
	for ns, dept := range map[string]string{nsA: "research", nsB: "", nsMkt: "marketing"} {
		deleteNamespaceAtEnd(t, ns)
		kubectlOK(t, namespaceYAML(ns, dept), "apply", "-f", "-")
	}
	for _, ns := range []string{nsA, nsB, nsMkt} {
		waitBound(t, ns, 30*time.Second)
	}
	waitAggregated(t)

	viewer := saSubject(nsA, "viewer")
	bindView(t, nsA, viewer)
	viewerToken := serviceAccountToken(t, nsA, viewer.Name)
	waitAllowed(t, viewer, nsA, gpuview.ResourceGPUAvailability)
	adminToken := gpuAdmin(t, nsB, "gpu-admin")

	// A notebook with one GPU runs in A; Run:ai reports what it holds.
	kubectlOK(t, podYAML(nsA, "nb", "notebook", 1, nil, ""), "apply", "-f", "-")
	assert.Equal(t, nsA, getPod(t, nsA, "nb").Labels[queueLabel])
	require.NoError(t, env.Sim.SetAllocation(nsA, 1.5, 1))
	require.NoError(t, env.Sim.SetFreeGPUs("default", 3))
	t.Cleanup(func() { _ = env.Sim.SetFreeGPUs("default", -1) })
	writes := simWrites()

	t.Run("own namespace: 200 with the simulator's numbers", func(t *testing.T) {
		code, body := viewGET(t, "GET", gpuview.NamespacePath(nsA), viewerToken)
		require.Equal(t, http.StatusOK, code, string(body))
		v := decodeJSON[gpuview.NamespaceView](t, body)
		assert.Equal(t, gpuview.StatusOK, v.Status, v.Message)
		assert.Equal(t, nsA, v.Namespace)
		assert.Equal(t, nsA, v.Project)
		assert.Equal(t, "research", v.Department)
		assert.Equal(t, "default", v.NodePool)
		assert.Equal(t, num(2), v.Deserved, "run_ai_project_gpu_quota of the suite")
		assert.Equal(t, num(1.5), v.Allocated)
		assert.Equal(t, num(1), v.AllocatedNonPreemptible)
		assert.Equal(t, num(1), v.AvailableNonPreemptible)
		assert.Equal(t, num(3), v.AvailablePreemptible)
		assert.True(t, v.TerminalGPUsAllowed)
		require.NotNil(t, v.ReadAt)
		assert.WithinDuration(t, time.Now(), *v.ReadAt, time.Minute)
	})
	t.Run("another namespace: 403", func(t *testing.T) {
		code, body := viewGET(t, "GET", gpuview.NamespacePath(nsB), viewerToken)
		assert.Equal(t, http.StatusForbidden, code, string(body))
		assert.Contains(t, decodeJSON[gpuview.ErrorBody](t, body).Message, "system:serviceaccount:"+nsA+":viewer")
	})
	t.Run("admin view without the admin role: 403", func(t *testing.T) {
		code, body := viewGET(t, "GET", gpuview.PathAdmin, viewerToken)
		assert.Equal(t, http.StatusForbidden, code, string(body))
	})
	t.Run("no token: 401; a token that is not one: 401", func(t *testing.T) {
		code, body := viewGET(t, "GET", gpuview.NamespacePath(nsA), "")
		assert.Equal(t, http.StatusUnauthorized, code, string(body))
		code, body = viewGET(t, "GET", gpuview.NamespacePath(nsA), "not-a-token")
		assert.Equal(t, http.StatusUnauthorized, code, string(body))
	})
	t.Run("unknown namespace: 404; namespace not managed: 404", func(t *testing.T) {
		code, body := viewGET(t, "GET", gpuview.NamespacePath("e2e-gpu-nowhere"), adminToken)
		assert.Equal(t, http.StatusNotFound, code, string(body))
		assert.Contains(t, decodeJSON[gpuview.ErrorBody](t, body).Message, "does not exist")
		code, body = viewGET(t, "GET", gpuview.NamespacePath("default"), adminToken)
		assert.Equal(t, http.StatusNotFound, code, string(body))
		assert.Contains(t, decodeJSON[gpuview.ErrorBody](t, body).Message, "not a Hopsworks project")
	})
	t.Run("only GET", func(t *testing.T) {
		code, _ := viewGET(t, "POST", gpuview.NamespacePath(nsA), viewerToken)
		assert.Equal(t, http.StatusMethodNotAllowed, code)
	})
	t.Run("admin view: departments and projects, marketing not linked", func(t *testing.T) {
		code, body := viewGET(t, "GET", gpuview.PathAdmin, adminToken)
		require.Equal(t, http.StatusOK, code, string(body))
		v := decodeJSON[gpuview.AdminView](t, body)
		assert.Equal(t, gpuview.StatusOK, v.Status, v.Message)
		depts := map[string]gpuview.DepartmentRow{}
		for _, d := range v.Departments {
			depts[d.Name] = d
		}
		require.Contains(t, depts, "marketing")
		assert.Equal(t, gpuview.StatusNotLinked, depts["marketing"].Status)
		require.NotNil(t, depts["marketing"].Linked)
		assert.False(t, *depts["marketing"].Linked)
		assert.Equal(t, "default", depts["marketing"].ProjectsGoTo)
		require.Contains(t, depts, "research")
		assert.Equal(t, gpuview.StatusOK, depts["research"].Status)
		assert.NotNil(t, depts["research"].GPUQuota)
		rows := map[string]gpuview.ProjectRow{}
		for _, p := range v.Projects {
			rows[p.Namespace] = p
		}
		assert.Equal(t, gpuview.StatusOK, rows[nsA].Status)
		assert.Equal(t, num(2), rows[nsA].GPUQuota)
		assert.Equal(t, num(1.5), rows[nsA].AllocatedGPUs)
		assert.Equal(t, "default", rows[nsMkt].Department, "marketing's project went to the default department")
	})
	t.Run("CLI: table and JSON", func(t *testing.T) {
		bin := buildCLI(t) // leave_test.go: built once per test binary
		ca := filepath.Join(env.CertDir, "ca.crt")
		direct := []string{"--server", env.WebhookURL, "--ca-file", ca}
		out := cli(t, bin, append([]string{"gpu", "-n", nsA, "--token", viewerToken}, direct...)...)
		t.Logf("runai-webhook gpu -n %s:\n%s", nsA, out)
		assert.Regexp(t, `Status:\s+OK`, out)
		assert.Regexp(t, `Deserved GPUs:\s+2\n`, out)
		assert.Regexp(t, `Available non-preemptible:\s+1\n`, out)
		assert.Regexp(t, `Available preemptible:\s+3\n`, out)

		var v gpuview.NamespaceView
		require.NoError(t, json.Unmarshal([]byte(cli(t, bin, append([]string{"gpu", "-n", nsA, "-o", "json", "--token", viewerToken}, direct...)...)), &v))
		assert.Equal(t, num(1), v.AvailableNonPreemptible)

		out = cli(t, bin, append([]string{"admin", "--token", adminToken}, direct...)...)
		t.Logf("runai-webhook admin:\n%s", out)
		assert.Regexp(t, `marketing\s+\d+\s+no\s+-\s+-\s+-\s+Not linked in Run:ai`, out)
		var a gpuview.AdminView
		require.NoError(t, json.Unmarshal([]byte(cli(t, bin, append([]string{"admin", "-o", "json", "--token", adminToken}, direct...)...)), &a))
		assert.NotEmpty(t, a.Projects)

		cmd := exec.Command(bin, append([]string{"admin", "--token", viewerToken}, direct...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.Error(t, cmd.Run(), "a viewer may not read the admin view")
		assert.Contains(t, stderr.String(), "403 Forbidden")
	})
	assert.Equal(t, writes, simWrites(), "reading the views wrote nothing to Run:ai")
}

func TestGPUViewUnboundNamespaceAndRunAIDown(t *testing.T) {
	skipWithoutSimulator(t)
	bound, unbound := "e2e-gpu-down", "e2e-gpu-unbound"
	deleteNamespaceAtEnd(t, bound)
	kubectlOK(t, namespaceYAML(bound, ""), "apply", "-f", "-")
	waitBound(t, bound, 30*time.Second)
	adminToken := gpuAdmin(t, bound, "gpu-admin-down")
	code, _ := viewGET(t, "GET", gpuview.NamespacePath(bound), adminToken)
	require.Equal(t, http.StatusOK, code)

	require.NoError(t, env.Sim.SetDown(true))
	t.Cleanup(func() { _ = env.Sim.SetDown(false) })
	deleteNamespaceAtEnd(t, unbound)
	kubectlOK(t, namespaceYAML(unbound, "research"), "apply", "-f", "-")
	failedAt := waitBindFailed(t, unbound)

	t.Run("Run:ai down: 200 RUN_AI_UNREACHABLE with null numbers", func(t *testing.T) {
		code, body := viewGET(t, "GET", gpuview.NamespacePath(bound), adminToken)
		require.Equal(t, http.StatusOK, code, string(body))
		raw := decodeJSON[map[string]any](t, body)
		assert.Equal(t, gpuview.StatusUnreachable, raw["status"], raw["message"])
		for _, k := range []string{"deserved", "allocated", "allocated_non_preemptible", "available_non_preemptible", "available_preemptible", "read_at"} {
			require.Contains(t, raw, k)
			assert.Nil(t, raw[k], "%s is null while Run:ai is down", k)
		}
		assert.Equal(t, false, raw["terminal_gpus_allowed"])

		code, body = viewGET(t, "GET", gpuview.PathAdmin, adminToken)
		require.Equal(t, http.StatusOK, code, string(body))
		v := decodeJSON[gpuview.AdminView](t, body)
		assert.Equal(t, gpuview.StatusUnreachable, v.Status)
		for _, p := range v.Projects {
			switch p.Namespace {
			case bound:
				assert.Equal(t, gpuview.StatusUnreachable, p.Status)
				assert.Nil(t, p.GPUQuota)
			case unbound:
				assert.Equal(t, gpuview.StatusNotLinked, p.Status, "not bound yet: known from the labels alone")
			}
		}
	})
	t.Run("unbound namespace: RUN_AI_PROJECT_NOT_BOUND, and reading it binds nothing", func(t *testing.T) {
		code, body := viewGET(t, "GET", gpuview.NamespacePath(unbound), adminToken)
		require.Equal(t, http.StatusOK, code, string(body))
		v := decodeJSON[gpuview.NamespaceView](t, body)
		assert.Equal(t, gpuview.StatusNotBound, v.Status)
		assert.Nil(t, v.Deserved)

		// With Run:ai back, reading the view still does not bind: no project
		// is created, the namespace keeps no queue label. (The controller
		// retries the failed bind 10s after it failed; everything below
		// happens well before that.)
		require.NoError(t, env.Sim.SetDown(false))
		creates := env.Sim.CountCalls(http.MethodPost, "/api/v1/org-unit/projects")
		for range 3 {
			code, body = viewGET(t, "GET", gpuview.NamespacePath(unbound), adminToken)
			require.Equal(t, http.StatusOK, code, string(body))
			assert.Equal(t, gpuview.StatusNotBound, decodeJSON[gpuview.NamespaceView](t, body).Status)
		}
		code, body = viewGET(t, "GET", gpuview.PathAdmin, adminToken)
		require.Equal(t, http.StatusOK, code, string(body))
		elapsed := time.Since(failedAt)
		if elapsed > 9*time.Second {
			t.Skipf("the checks took %s, past the controller's retry: the no-write check would race it", elapsed)
		}
		assert.Equal(t, creates, env.Sim.CountCalls(http.MethodPost, "/api/v1/org-unit/projects"), "the simulator recorded no project creation")
		_, exists := env.Sim.ProjectByName(unbound)
		assert.False(t, exists)
		assert.Empty(t, getNamespace(t, unbound).Labels[queueLabel], "still unbound after its views were read")
		for _, p := range decodeJSON[gpuview.AdminView](t, body).Projects {
			if p.Namespace == unbound {
				assert.Equal(t, gpuview.StatusNotLinked, p.Status)
			}
		}
	})
}

// waitBindFailed waits for the controller's failed bind of ns (its event),
// and returns when it was seen.
func waitBindFailed(t *testing.T, ns string) time.Time {
	t.Helper()
	require.Eventually(t, func() bool {
		var events corev1.EventList
		if err := env.Client.List(context.Background(), &events, client.MatchingFields{"involvedObject.name": ns}); err != nil {
			return false
		}
		for _, e := range events.Items {
			if e.Reason == "BindFailed" {
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "the controller tried to bind %s while Run:ai was down", ns)
	return time.Now()
}

func cli(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "runai-webhook %s: %s", strings.Join(args[:2], " "), stderr.String())
	return stdout.String()
}
